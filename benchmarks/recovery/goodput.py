"""Goodput under a replayed failure trace: disk-checkpoint restarts against memory recovery + warm spares.

Run: ``.venv/bin/python -m benchmarks.recovery.goodput`` (about 15 minutes on 2 cores; ``--steps
30 --faults 4 --seed 0``; the 99M-parameter GPT of benchmarks/memory, AdamW, 2 gloo ranks).

The trace: ``--faults`` faults at steps drawn from ``--seed`` (at least 4 steps apart), each a
SIGKILL of a random rank or, the second of every four, a rank hanging (SIGSTOP;
``training.timeout`` finds it). A lost host is not in it: that needs the network-namespace
hosts of the tests (tests/distributed/launcher/test_netns_lost_host.py). The same trace is
replayed on three jobs of ``--steps`` steps, each under the launcher with enough restarts
(``goodput_rank.py``):

- ``uninterrupted``: no fault (the reference: its final weights, its steady step time);
- ``disk``: a disk checkpoint every ``--disk-every`` steps, a restart resumes from it;
- ``memory + warm``: the same disk checkpoints, plus memory snapshots every ``--memory-every``
  steps (``checkpoint.memory_every``) and ``--warm-spares``.

Goodput is the useful time over the wall time of the whole job (launch to exit): useful is
``--steps`` x the uninterrupted job's median step time, so everything else (start-up, restarts,
the steps recomputed, the time a hang takes to be found, snapshot and save stalls) is the loss.
Prints the table and checks that each faulted job's final weights equal the uninterrupted
job's, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common.jobs import launcher, make_corpus
from benchmarks.recovery.state import train_settings

HERE = Path(__file__).resolve().parent


def trace(steps: int, count: int, seed: int) -> list[list[Any]]:
    """``count`` faults ``[step, rank, kind]`` at least 4 steps apart, none in the first or last 3
    steps; the rank drawn, the kind by turn (the second of every four is a hang)."""
    draw = random.Random(seed)
    while True:
        at = sorted(draw.sample(range(3, steps - 3), count))
        if all(b - a >= 4 for a, b in zip(at, at[1:])):
            return [[s, draw.randrange(2), "hang" if i % 4 == 1 else "kill"] for i, s in enumerate(at)]


def run_job(name: str, root: Path, args: argparse.Namespace, faults: list, corpus: Path) -> dict[str, Any]:
    out, run = root / f"out_{name.split()[0]}", root / f"run_{name.split()[0]}"
    out.mkdir()
    settings = train_settings(args, corpus)
    settings = [s for s in settings if not s.startswith(("training.steps=", "checkpoint.every_steps="))]
    settings += [
        f"run.dir={run}",
        f"training.steps={args.steps}",
        f"training.timeout={args.timeout}",
        f"checkpoint.every_steps={args.disk_every}",
        f"checkpoint.memory_every={args.memory_every if name == 'memory + warm' else 0}",
    ]
    command = launcher(2, len(faults) + 1, *(["--warm-spares"] if name == "memory + warm" else []))
    command += [str(HERE / "goodput_rank.py"), str(out), json.dumps(faults), "--set", *settings]
    start = time.time()
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    wall = time.time() - start
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    records = [line.split() for line in (out / "steps").read_text().splitlines()]
    marks = [(int(s), float(t)) for s, t in records]
    spans = [t1 - t0 for (s0, t0), (s1, t1) in zip(marks, marks[1:]) if s1 == s0 + 1]
    final = torch.load(run / "checkpoints" / f"step_{args.steps:08d}" / "state.pt", weights_only=True)["model"]
    return {"wall": wall, "step": statistics.median(spans), "stepped": len(marks), "model": final}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--faults", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--disk-every", type=int, default=10)
    parser.add_argument("--memory-every", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0, help="training.timeout: when a hang is found")
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=14)
    args = parser.parse_args()
    faults = trace(args.steps, args.faults, args.seed)
    print(f"trace (step, rank, kind): {faults}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="na_goodput_") as tmp:
        root = Path(tmp)
        corpus = make_corpus(root)
        for name in ("uninterrupted", "disk", "memory + warm"):
            results[name] = run_job(name, root, args, [] if name == "uninterrupted" else faults, corpus)
            print(f"{name}: {results[name]['wall']:.1f} s", flush=True)
    useful = args.steps * results["uninterrupted"]["step"]
    reference = results["uninterrupted"]["model"]
    print(f"\nuseful time: {args.steps} steps x {results['uninterrupted']['step']:.3f} s = {useful:.1f} s")
    print("| job | wall | goodput | steps run (of which recomputed) | final weights equal to uninterrupted |")
    print("|---|---|---|---|---|")
    equal_all = True
    for name, r in results.items():
        equal = (
            all(torch.equal(r["model"][k], v) for k, v in reference.items()) and r["model"].keys() == reference.keys()
        )
        equal_all &= equal
        recomputed = r["stepped"] - args.steps
        print(f"| {name} | {r['wall']:.1f} s | {useful / r['wall']:.0%} | {r['stepped']} ({recomputed}) | {equal} |")
    if not equal_all:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
