"""Threads or processes? IceNet training throughput on this machine's cores (seed 001's question).

Run: ``.venv/bin/python -m benchmarks.sea_ice_scaling.icenet_scaling [--rounds 3 --steps 200 --warmup 20]``
(``--compile`` adds 1 process x 1 thread and 2 processes x 1 thread with training.compile=true;
``--set KEY=VALUE`` passes overrides to every run, e.g. ``--set training.prefetch=false``;
``--compile-step`` only times one U-Net step (batch 8, one thread) eager vs training.compile's
compiled blocks in this process: first-step compile time, ms per step, largest gradient difference).

Three ways to use 2 cores on the same work (configs/icenet.yaml, same global batch, same
number of steps): 1 process x 1 thread (the baseline), 1 process x 2 threads (PyTorch's
intra-op threading), 2 processes x 1 thread (our DDP over gloo). Runs are interleaved
(one of each per round, order reversed every other round) so drift hits all of them alike.

What is timed: steady-state training only. Rank 0 logs a metrics row every 10 steps with a
timestamp (logs/rank_0.log); throughput = samples between the row at step ``--warmup`` and
the last row, divided by the time between them. Start-up (interpreter, imports, launcher,
rendezvous, reading the store, the first ``--warmup`` steps' extra cost) is measured
separately: the wall time before that row minus ``--warmup`` steps at the steady rate; it
is printed with its share of the run's wall time. Prints per-round ratios (targets: 2
processes >= 1.8x the 1-process, 1-thread throughput and faster than 1 process x 2 threads
in every round), medians, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

MODES = {
    "1 process x 1 thread": (1, 1, False),
    "1 process x 2 threads": (1, 2, False),
    "2 processes x 1 thread": (2, 1, False),
}
COMPILED = {"1 process x 1 thread, compiled": (1, 1, True), "2 processes x 1 thread, compiled": (2, 1, True)}
ROW = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \[rank 0\] step (\d+) ")
EVERY = 10  # logging.every_steps: one timestamped row per 10 steps
GLOBAL_BATCH = 16  # configs/icenet.yaml's training.global_batch_size


def create_data(path: Path) -> None:
    """configs/icenet.yaml's synthetic sea-ice store at ``path`` (``neural-arch create-data``)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "neural_arch.cli",
            "create-data",
            "--config",
            "configs/icenet.yaml",
            "--set",
            f"data.path={path}",
        ],
        check=True,
        capture_output=True,
    )


def run(data: Path, out: Path, mode: tuple[int, int, bool], args: argparse.Namespace) -> dict[str, float]:
    """One ``neural-arch train``; its steady-state samples/s, start-up seconds and wall seconds."""
    procs, threads, compiled = mode
    overrides = [
        f"data.path={data}",
        f"run.dir={out}",
        f"training.steps={args.steps}",
        "training.val_every=0",
        "checkpoint.every_steps=0",
        "logging.progress=false",
        "logging.tensorboard=false",
        "checkpoint.resume=none",
        f"logging.every_steps={EVERY}",
        f"training.compile={str(compiled).lower()}",
        *args.set,
    ]
    cmd = [
        sys.executable,
        "-m",
        "neural_arch.cli",
        "train",
        "--config",
        "configs/icenet.yaml",
        "--nproc-per-node",
        str(procs),
    ]
    for o in overrides:
        cmd += ["--set", o]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    begun = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    wall = time.time() - begun
    if proc.returncode != 0:
        raise RuntimeError(f"run failed ({procs} x {threads}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    rows = {}
    for line in (out / "logs" / "rank_0.log").read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[int(m.group(2))] = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    last = max(rows)
    seconds = rows[last] - rows[args.warmup]
    rate = (last - args.warmup) * args.batch / seconds
    startup = rows[args.warmup] - begun - args.warmup * args.batch / rate
    return {"rate": rate, "startup": startup, "wall": wall, "window": seconds}


def compile_step(rounds: int = 3, steps: int = 10) -> None:
    """Eager vs compiled blocks (training.compile) on one forward/backward of the U-Net."""
    import copy

    import torch

    from neural_arch.apps.icenet.model import IceNetUNet, masked_weighted_cross_entropy
    from neural_arch.training.builders import compile_blocks

    torch.set_num_threads(1)
    torch.manual_seed(0)
    eager = IceNetUNet(10, leads=3, widths=(16, 32, 64))  # configs/icenet.yaml's model and channels
    compiled = copy.deepcopy(eager)
    count = compile_blocks(compiled)
    active, x, y = torch.rand(48, 48) > 0.3, torch.randn(8, 10, 48, 48), torch.randint(0, 3, (8, 3, 48, 48))

    def step(model: torch.nn.Module) -> None:
        model.zero_grad()
        masked_weighted_cross_entropy(model(x), y, active).mean().backward()

    begun = time.perf_counter()
    step(compiled)
    print(f"{count} blocks compiled; first compiled step {time.perf_counter() - begun:.1f} s", flush=True)
    step(eager)
    diff = max(float((a.grad - b.grad).abs().max()) for a, b in zip(eager.parameters(), compiled.parameters()))
    print(f"largest gradient difference compiled vs eager: {diff:.2e}")
    for r in range(rounds):
        times = {}
        for name, model in (("eager", eager), ("compiled", compiled)):
            begun = time.perf_counter()
            for _ in range(steps):
                step(model)
            times[name] = (time.perf_counter() - begun) / steps * 1e3
        print(
            f"round {r + 1}: eager {times['eager']:.1f} ms/step, compiled {times['compiled']:.1f} ms/step "
            f"({times['eager'] / times['compiled']:.2f}x)  load {os.getloadavg()[0]:.2f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20, help="steps before the timed window (a multiple of 10)")
    parser.add_argument("--compile", action="store_true", help="also time training.compile=true")
    parser.add_argument("--set", action="append", default=[], help="override for every run, KEY=VALUE")
    parser.add_argument("--compile-step", action="store_true", help="only time one U-Net step eager vs compiled")
    args = parser.parse_args()
    if args.compile_step:
        compile_step()
        return
    if args.warmup % EVERY or args.steps <= args.warmup:
        parser.error(f"--warmup must be a multiple of {EVERY} and below --steps")
    args.batch = GLOBAL_BATCH
    modes = {**MODES, **(COMPILED if args.compile else {})}
    load_before = os.getloadavg()
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "icenet.zarr"
        create_data(data)
        for r in range(args.rounds):
            order = list(modes) if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                got = run(data, Path(tmp) / f"run_{r}_{list(modes).index(mode)}", modes[mode], args)
                results[mode].append(got)
                print(
                    f"round {r + 1}: {mode:34s} {got['rate']:7.1f} samples/s  start-up {got['startup']:5.1f} s "
                    f"({got['startup'] / got['wall']:4.1%} of {got['wall']:5.1f} s wall)  "
                    f"load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    report(results, args, load_before)


def report(
    results: dict[str, list[dict[str, float]]], args: argparse.Namespace, load_before: tuple[float, ...]
) -> None:
    one, threads, two = (results[m] for m in MODES)
    print(
        f"\nconfigs/icenet.yaml, {args.steps} steps per run, timed steps {args.warmup}..{args.steps}, "
        f"{args.rounds} interleaved rounds, {os.cpu_count()} cores, overrides {args.set or 'none'}"
    )
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    for r in range(args.rounds):
        vs_one, vs_threads = two[r]["rate"] / one[r]["rate"], two[r]["rate"] / threads[r]["rate"]
        print(
            f"round {r + 1}: 2 processes / 1x1 = {vs_one:.2f}x (target >= 1.8), / 1x2 threads = {vs_threads:.2f}x "
            f"(target > 1){'' if vs_one >= 1.8 and vs_threads > 1 else '  <- target missed'}"
        )
    base = statistics.median(x["rate"] for x in one)
    for mode, values in results.items():
        median = statistics.median(x["rate"] for x in values)
        startup = statistics.median(x["startup"] for x in values)
        print(f"{mode:34s} {median:7.1f} samples/s  speedup {median / base:4.2f}x  start-up {startup:4.1f} s")


if __name__ == "__main__":
    main()
