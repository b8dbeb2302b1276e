"""The trainer's own per-step work, without communication: one process, a tiny model.

Run: ``.venv/bin/python -m benchmarks.overhead.step_overhead [--rounds 5 --steps 1500]``

On 2 ranks a step includes an all-reduce whose time moves by tens of percent on this
machine, which hides a change of the trainer's Python work (trainer_overhead.py). Here one
process trains a 16-unit MLP (8 -> 16 -> 1, batch 16) whose step is almost all Python, in
interleaved rounds: a hand-written loop (index slice, forward, MSE, backward, SGD step) and
``train()`` with checkpoints, progress bar and TensorBoard off. It prints both medians, the
ratio, and the difference in microseconds: the framework's fixed cost per step.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from benchmarks.overhead.trainer_overhead import trainer_run
from neural_arch.apps.regression.task import RegressionTask
from neural_arch.training.config import load_config

WARMUP = 10


def config(run_dir: str, steps: int):
    return load_config(
        None,
        [
            f"run.dir={run_dir}",
            "model.hidden=16",
            "model.depth=1",
            "data.features=8",
            "data.num_samples=5120",
            "data.val_samples=64",
            "training.global_batch_size=16",
            f"training.steps={steps}",
            "checkpoint.every_steps=0",
            "logging.progress=false",
            "logging.tensorboard=false",
            "schedule.decay=constant",
            "optim.momentum=0.0",
        ],
        world_size=1,
    )


def hand_loop(cfg, steps: int) -> list[float]:
    task = RegressionTask(cfg)
    model = task.build_model()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optim.lr)
    x, y, batch = task.data.train_x, task.data.train_y, cfg.training.global_batch_size
    stamps = [time.perf_counter()]
    for step in range(steps):
        ids = torch.arange(step * batch, (step + 1) * batch) % len(x)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[ids]), y[ids]).backward()
        opt.step()
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    torch.set_num_threads(1)
    medians: dict[str, list[float]] = {"hand": [], "trainer": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in ("hand", "trainer") if r % 2 == 0 else ("trainer", "hand"):
                cfg = config(f"{tmp}/r{r}-{name}", args.steps)
                times = hand_loop(cfg, args.steps) if name == "hand" else trainer_run(cfg)
                medians[name].append(statistics.median(times[WARMUP:]))
    hand, ours = statistics.median(medians["hand"]), statistics.median(medians["trainer"])
    print(f"1 process, MLP 8->16->1, batch 16, {args.rounds} interleaved rounds x {args.steps} steps")
    print("hand loop median step (per round, us):", [round(m * 1e6) for m in medians["hand"]])
    print("trainer   median step (per round, us):", [round(m * 1e6) for m in medians["trainer"]])
    print(
        f"hand {hand * 1e6:.0f} us, trainer {ours * 1e6:.0f} us: ratio {ours / hand:.2f}, "
        f"framework cost {(ours - hand) * 1e6:.0f} us per step"
    )


if __name__ == "__main__":
    main()
