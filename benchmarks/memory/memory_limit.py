"""A GPT whose training state does not fit one rank's memory limit trains on FSDP x2, not on DDP x2.

Run (as root, cgroup v1): ``.venv/bin/python -m benchmarks.memory.memory_limit [--limit-gib 1.25]
[--d-model 768 --layers 14 --steps 10]``

Both jobs train the same byte-level GPT (about 99M parameters at the defaults: fp32 weights,
gradients and AdamW's two moments make 1.58 GB of training state) for ``--steps`` steps on 2
gloo ranks and save at the end. Every rank process runs in its own memory cgroup whose hard
limit (``--limit-gib``) is below that full state (benchmarks/memory/limited_rank.sh). DDP keeps
the whole state on every rank and must be killed; FSDP x2 keeps half of it per rank and must
finish with its checkpoint written. Prints the limit, each rank's peak resident memory
(``VmHWM``) and the outcome; exits 1 if either outcome differs. Validation uses one global
batch (``training.val_batches=1``) so the run measures memory, not validation time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional

from benchmarks.common.jobs import gpt_settings, launcher, make_corpus
from benchmarks.memory.limited_rank import CGROUP_ROOT, cgroup_path
from neural_arch.apps.gpt.model import GPT, count_parameters

HERE = Path(__file__).resolve().parent
LAYOUTS = {"DDP x2": [], "FSDP x2": ["parallel.dp_shard=2"]}
EXPECTED = {"DDP x2": "killed", "FSDP x2": "trained and saved"}


def train_args(args: argparse.Namespace, run_dir: Path, corpus: Path) -> list[str]:
    """``neural-arch train`` settings of both jobs (the layout comes on top)."""
    settings = [
        *gpt_settings(args.d_model, args.layers, corpus),
        f"run.dir={run_dir}",
        f"training.steps={args.steps}",
        "training.global_batch_size=4",
        "training.val_batches=1",
        "training.report=false",  # memory of training and saving; a sharded report's samples take long
        f"checkpoint.every_steps={max(args.steps // 2, 1)}",  # a save mid-run and one at the end
        # checkpoint.async_save stays at its default (true): where a rank has no room for the
        # staging copy, the save is synchronous (staging_room.py) instead of an OOM kill
        "optim.name=adamw",
        "logging.progress=false",
        "logging.tensorboard=false",
    ]
    return ["--set", *settings]


def run_job(
    name: str, args: argparse.Namespace, root: Path, limit: int, layout: Optional[list[str]] = None, ranks: int = 2
) -> dict:
    """One job of ``ranks`` processes under the launcher (``layout``: its ``--set`` values; default
    ``LAYOUTS[name]``), each rank in its own cgroup; its ranks' records and outcome."""
    layout = LAYOUTS[name] if layout is None else layout
    tag, out = uuid.uuid4().hex[:8], root / f"out_{len(name)}_{uuid.uuid4().hex[:4]}"
    run_dir = root / name.replace(" ", "_")
    command = launcher(
        ranks,
        0,
        "--no-python",
        str(HERE / "limited_rank.sh"),
        str(limit),
        str(out),
        tag,
        *train_args(args, run_dir, root / "corpus"),
        *(["--set", *layout] if layout else []),
    )
    started = time.monotonic()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON=sys.executable)
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
    seconds = time.monotonic() - started
    records = []
    for rank in range(ranks):
        group = cgroup_path(tag, rank)
        oom = _oom_kills(group)
        record_file = out / f"rank_{rank}.json"
        record = json.loads(record_file.read_text()) if record_file.exists() else {"rank": rank}
        record["oom_kills"] = oom
        records.append(record)
        _remove(group)
    saved = (run_dir / "checkpoints" / f"step_{args.steps:08d}").is_dir()
    if proc.returncode == 0 and saved:
        outcome = "trained and saved"
    elif any(r["oom_kills"] for r in records):
        outcome = "killed"
    else:
        outcome = f"failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
    return {"name": name, "ranks": records, "outcome": outcome, "seconds": seconds, "run_dir": run_dir}


def _oom_kills(group: Path) -> int:
    try:
        text = (group / "memory.oom_control").read_text()
    except OSError:
        return 0
    fields = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
    return int(fields.get("oom_kill", 0))


def _remove(group: Path) -> None:
    for _ in range(50):  # the group can be removed once its processes are gone
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, default=1.25, help="hard memory limit of each rank process")
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=14)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    if not os.access(CGROUP_ROOT, os.W_OK):
        print(f"skipped: {CGROUP_ROOT} is not writable (needs root and cgroup v1 memory controller)")
        return 0
    params = count_parameters(GPT(d_model=args.d_model, n_layers=args.layers, n_heads=args.d_model // 64, context=64))
    state = params * 4 * 4  # fp32 weights, gradients, AdamW exp_avg and exp_avg_sq
    limit = int(args.limit_gib * 2**30)
    print(f"GPT d_model {args.d_model}, {args.layers} blocks: {params / 1e6:.1f}M parameters, full training state ")
    print(f"{state / 2**30:.2f} GiB; per-rank hard limit {limit / 2**30:.2f} GiB ({limit / state:.0%} of the state)")
    failures = 0
    with tempfile.TemporaryDirectory(prefix="memory_limit_") as tmp:
        make_corpus(Path(tmp))
        for name in LAYOUTS:
            result = run_job(name, args, Path(tmp), limit)
            peaks = ", ".join(
                f"rank {r['rank']} "
                + (f"{r['vm_hwm'] / 2**30:.2f} GiB" if "vm_hwm" in r else "no record")
                + (f" (OOM kills {r['oom_kills']})" if r["oom_kills"] else "")
                for r in result["ranks"]
            )
            ok = result["outcome"] == EXPECTED[name]
            failures += not ok
            print(
                f"{name:8s} peak VmHWM: {peaks}; {result['outcome']} in {result['seconds']:.0f} s "
                f"(expected: {EXPECTED[name]}{'' if ok else '  <-- MISMATCH'})"
            )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
