"""One training rank inside its own memory cgroup: ``limited_rank.py LIMIT_BYTES OUT_DIR TAG TRAIN_ARGS...``.

Run by benchmarks/memory_limit.py under the launcher (``--nproc_per_node=2``), never by hand.
The process creates ``/sys/fs/cgroup/memory/neural_arch_<TAG>_rank<R>`` (cgroup v1) with a hard
``memory.limit_in_bytes``, moves itself (and the charges of what it already allocated) into
it, then trains like ``neural-arch train TRAIN_ARGS``. Whatever the rank allocates from then
on counts against its own limit alone: exceeding it is an OOM kill of this rank. On the way
out it writes ``OUT_DIR/rank_<R>.json``: its peak resident memory (``VmHWM``) and the
cgroup's peak usage.
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


def join_cgroup(limit: int, tag: str, rank: int) -> Path:
    """A fresh memory cgroup for this rank with ``limit`` bytes; this process moved into it."""
    group = cgroup_path(tag, rank)
    group.mkdir(exist_ok=True)
    (group / "memory.move_charge_at_immigrate").write_text("3")  # bring the pages already touched
    (group / "memory.limit_in_bytes").write_text(str(limit))
    (group / "cgroup.procs").write_text(str(os.getpid()))
    return group


def peak_rss() -> int:
    """This process's peak resident set size (``VmHWM``), bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    limit, out, tag = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    rank = int(os.environ["RANK"])
    group = join_cgroup(limit, tag, rank)
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
