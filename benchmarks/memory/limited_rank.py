"""A training rank that reports its memory: ``limited_rank.py LIMIT_BYTES OUT_DIR TAG TRAIN_ARGS...``.

Started by benchmarks/memory/limited_rank.sh, which has already put this process in its own memory
cgroup (``/sys/fs/cgroup/memory/neural_arch_<TAG>_rank<R>``, hard limit LIMIT_BYTES). Trains like
``neural-arch train TRAIN_ARGS``; on the way out (not when the limit kills it) writes
``OUT_DIR/rank_<R>.json``: its peak resident memory (``VmHWM``) and the cgroup's peak usage.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from neural_arch.cli.train import build_parser
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")


def cgroup_path(tag: str, rank: int) -> Path:
    """Where rank ``rank`` of the job tagged ``tag`` keeps its memory cgroup."""
    return CGROUP_ROOT / f"neural_arch_{tag}_rank{rank}"


def peak_rss() -> int:
    """This process's peak resident set size (``VmHWM``), bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    out, tag = Path(sys.argv[2]), sys.argv[3]
    rank = int(os.environ["RANK"])
    group = cgroup_path(tag, rank)
    args = build_parser().parse_args(sys.argv[4:])
    outcome = "failed"
    try:
        train(load_config(args.config, args.overrides))
        outcome = "trained and saved"
    finally:
        usage = int((group / "memory.max_usage_in_bytes").read_text())
        record = {"rank": rank, "vm_hwm": peak_rss(), "cgroup_peak": usage, "outcome": outcome}
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank_{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
