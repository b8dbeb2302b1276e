"""The fixed cost of a command: a 1-step run and "nothing to do", against ``import torch``.

Run: ``.venv/bin/python -m benchmarks.overhead.fixed_cost [--rounds 7]``

What a user waits for in an edit-run loop, timed from the shell's side (process start to exit),
in interleaved rounds; each round times, in this order:

* ``python -c "import torch"``: the baseline, the least any torch command costs;
* ``neural-arch train --config tiny --set training.steps=1`` in a fresh run directory, on 1
  process and on 2 (``--nproc-per-node 2``: the launcher and two workers);
* the same commands again on those finished runs: "nothing to do" (1 and 2 processes).

It prints each command's median seconds and the ratio of medians to the baseline's median
(and the median of per-round ratios, which is steadier when the machine's load drifts between
rounds). Targets (issue 35): 1 process <= 2.5x, 2 processes <= 4x, nothing to do <= 1.5x.
Each command runs with one OpenMP thread per process (``OMP_NUM_THREADS=1``), as the tests do.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"train, 1 process": 2.5, "train, 2 processes": 4.0, "nothing to do": 1.5, "nothing to do, 2 proc.": 1.5}
CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"


def timed(command: list[str]) -> float:
    """Wall seconds from start to exit; a failure stops the benchmark with its output."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds


def train(run_dir: Path, *more: str) -> list[str]:
    settings = ["training.steps=1", f"run.dir={run_dir}"]
    return [sys.executable, "-m", "neural_arch.cli", "train", "--config", str(CONFIG), *more, "--set", *settings]


def one_round(scratch: Path, index: int) -> dict[str, float]:
    """Every command once; the run directories are fresh, so each run trains."""
    one, two = scratch / f"one_{index}", scratch / f"two_{index}"
    return {
        "import torch": timed([sys.executable, "-c", "import torch"]),
        "train, 1 process": timed(train(one)),
        "train, 2 processes": timed(train(two, "--nproc-per-node", "2")),
        "nothing to do": timed(train(one)),
        "nothing to do, 2 proc.": timed(train(two, "--nproc-per-node", "2")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fixed_cost_") as scratch:
        timed(train(Path(scratch) / "warm"))  # page cache, .pyc files, the peak FLOP/s cache
        rounds = []
        for index in range(args.rounds):
            rounds.append(one_round(Path(scratch), index))
            print(f"round {index + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rounds[-1].items()), flush=True)
    base = statistics.median(r["import torch"] for r in rounds)
    print(f"\nload average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'command':22s} {'median s':>9s} {'ratio of medians':>17s} {'median ratio':>13s} {'target':>7s}")
    print(f"{'import torch':22s} {base:9.2f}")
    for name, target in TARGETS.items():
        median = statistics.median(r[name] for r in rounds)
        per_round = statistics.median(r[name] / r["import torch"] for r in rounds)
        print(f"{name:22s} {median:9.2f} {median / base:17.2f} {per_round:13.2f} {target:7.1f}")


if __name__ == "__main__":
    main()
