"""Threads or processes? IceNet training throughput on this machine's cores (seed 001's question).

Run: ``.venv/bin/python benchmarks/icenet_scaling.py [--rounds 3 --steps 40]``

Three ways to use 2 cores on the same work (configs/icenet.yaml, same global batch, same
number of steps): 1 process x 1 thread (the baseline), 1 process x 2 threads (PyTorch's
intra-op threading), 2 processes x 1 thread (our DDP over gloo). Runs are interleaved
(one of each per round) so drift hits all three alike; each run's training throughput
(samples/s over the training loop, excluding start-up and the final evaluation) comes
from its summary.json. Prints medians, speedups over the baseline and parallel efficiency.
Target: 2 processes >= 1.7x the 1-process, 1-thread throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MODES = {"1 process x 1 thread": (1, 1), "1 process x 2 threads": (1, 2), "2 processes x 1 thread": (2, 1)}


def run(data: Path, out: Path, procs: int, threads: int, steps: int) -> float:
    overrides = [f"data.path={data}", f"run.dir={out}", f"training.steps={steps}", "training.val_every=0",
                 "checkpoint.every_steps=0", "logging.progress=false", "logging.tensorboard=false", "checkpoint.resume=none"]
    cmd = [sys.executable, "-m", "neural_arch.cli", "train", "--config", "configs/icenet.yaml", "--nproc-per-node", str(procs)]
    for o in overrides:
        cmd += ["--set", o]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"run failed ({procs} x {threads}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return json.loads((out / "summary.json").read_text())["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "icenet.zarr"
        subprocess.run([sys.executable, "-m", "neural_arch.cli", "create-data", "--config", "configs/icenet.yaml",
                        "--set", f"data.path={data}"], check=True, capture_output=True)
        rates: dict[str, list[float]] = {m: [] for m in MODES}
        for r in range(args.rounds):
            order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
            for mode in order:
                procs, threads = MODES[mode]
                rates[mode].append(run(data, Path(tmp) / f"run_{r}_{procs}_{threads}", procs, threads, args.steps))
                print(f"round {r + 1}: {mode:24s} {rates[mode][-1]:7.1f} samples/s", flush=True)
    base = statistics.median(rates["1 process x 1 thread"])
    print(f"\nconfigs/icenet.yaml, {args.steps} steps per run, {args.rounds} interleaved rounds, {os.cpu_count()} cores")
    for mode, values in rates.items():
        median, workers = statistics.median(values), MODES[mode][0] * MODES[mode][1]
        print(f"{mode:24s} {median:7.1f} samples/s  speedup {median / base:4.2f}x  efficiency {median / base / workers:5.1%}")


if __name__ == "__main__":
    main()
