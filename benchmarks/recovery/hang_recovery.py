"""How long a hung rank costs: from a rank's SIGSTOP inside DDP's all-reduce to the restarted job's first step.

Run: ``.venv/bin/python -m benchmarks.recovery.hang_recovery [--rounds 10 --timeout 10]``

Each round launches 2 gloo ranks (one restart allowed) of the regression MLP with
``training.timeout=TIMEOUT`` and a checkpoint every 2 steps; rank 1 SIGSTOPs itself in its forward
at step 3 while rank 0 waits in DDP's gradient all-reduce (benchmarks/recovery/hang_recovery_rank.py).
Rank 0 times out after TIMEOUT s and names rank 1, every worker writes its stacks, the launcher
wakes and stops the group and starts the next attempt, which resumes from step 2. Prints each
round's seconds from the stop to the restarted attempt's first finished step, their median and
maximum, and the target: at most TIMEOUT + 5 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common.jobs import launcher

HERE = Path(__file__).resolve().parent


def one_round(root: Path, timeout: float) -> float:
    out = root / "marks"
    out.mkdir(parents=True)
    settings = [
        f"run.dir={root / 'run'}",
        "training.steps=6",
        f"training.timeout={timeout}",
        "checkpoint.every_steps=2",
        "logging.progress=false",
        "logging.tensorboard=false",
    ]
    command = launcher(2, 1, str(HERE / "hang_recovery_rank.py"), str(out), "--set", *settings)
    proc = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0 or not (out / "recovered").exists():
        raise SystemExit(f"the round did not recover:\n{proc.stderr[-3000:]}")
    return float((out / "recovered").read_text()) - float((out / "stopped").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=10.0, help="training.timeout, seconds")
    args = parser.parse_args()
    seconds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="hang_recovery_") as tmp:
            seconds.append(one_round(Path(tmp), args.timeout))
        print(f"round {r + 1}: {seconds[-1]:.1f} s from the stop to the restarted job's first step", flush=True)
    median, worst = statistics.median(seconds), max(seconds)
    target = args.timeout + 5
    print(f"median {median:.1f} s, max {worst:.1f} s over {len(seconds)} rounds; target <= {target:.0f} s")
    return 0 if worst <= target else 1


if __name__ == "__main__":
    sys.exit(main())
