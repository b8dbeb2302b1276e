"""Our trainer vs a hand-written minimal DDP loop: step time at 2 ranks, interleaved.

Run: ``.venv/bin/python -m benchmarks.overhead.trainer_overhead [--rounds 7 --steps 300 --hidden 512]``

Both train the same MLP on the same synthetic data with the same global batch on 2 gloo
ranks (1 thread each). The hand loop is what a careful user writes with raw torch DDP:
sampler slice, forward, MSE, backward, SGD step. The trainer runs with its defaults
(metrics every logging.every_steps, exact loss bookkeeping),
minus the progress bar and TensorBoard. Per-step times come from timestamps between steps (the trainer's
``on_step`` hook); the first 5 steps of each run are warm-up. Three runs per round,
interleaved: the hand loop, the trainer with checkpoints off (its median step vs the
hand loop's is the step-time ratio, target <= 1.03), and the trainer checkpointing at the
default interval (its MEAN step, which includes the saves and whatever they slow down
afterwards, vs the checkpoint-free trainer's mean step is the checkpoint cost).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

from benchmarks.common.two_ranks import on_two_ranks
from neural_arch.apps.regression.task import RegressionTask
from neural_arch.training.config import CheckpointConfig, load_config
from neural_arch.training.trainer import train


def config(args: argparse.Namespace, run_dir: str, checkpoint_every: int):
    return load_config(
        None,
        [
            f"run.dir={run_dir}",
            f"model.hidden={args.hidden}",
            "model.depth=3",
            "data.features=64",
            f"data.num_samples={args.batch * 20}",
            "data.val_samples=64",
            f"training.global_batch_size={args.batch}",
            f"training.steps={args.steps}",
            f"checkpoint.every_steps={checkpoint_every}",
            "logging.progress=false",
            "logging.tensorboard=false",
            "schedule.decay=constant",
            "optim.momentum=0.0",
        ],
        world_size=2,
    )


def hand_loop(cfg, steps: int) -> list[float]:
    task = RegressionTask(cfg)
    data = task.data
    model = torch.nn.parallel.DistributedDataParallel(task.build_model())
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optim.lr)
    rank, world, batch = dist.get_rank(), dist.get_world_size(), cfg.training.global_batch_size
    stamps = [time.perf_counter()]
    n = len(data.train_x)
    for step in range(steps):
        first = (step * batch) % (n - batch)
        ids = torch.arange(first + rank, first + batch, world)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(data.train_x[ids]), data.train_y[ids]).backward()
        opt.step()
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps, stamps[1:])]


def trainer_run(cfg) -> list[float]:
    stamps: list[float] = []
    train(cfg, resume="none", on_step=lambda step: stamps.append(time.perf_counter()))
    return [b - a for a, b in zip(stamps, stamps[1:])]


def body(rank: int, args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    default_every = CheckpointConfig().every_steps
    results: dict[str, list[float]] = {"hand": [], "trainer": [], "trainer+ckpt": []}
    means: dict[str, list[float]] = {"trainer": [], "trainer+ckpt": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            names = list(results) if r % 2 == 0 else list(reversed(results))
            for name in names:
                cfg = config(args, f"{tmp}/r{r}-{name}", default_every if name == "trainer+ckpt" else 0)
                times = hand_loop(cfg, args.steps) if name == "hand" else trainer_run(cfg)
                warm = times[5:]
                results[name].append(statistics.median(warm))
                if name in means:  # the mean includes the saves and whatever they slow down afterwards
                    means[name].append(statistics.mean(warm))
    return results, means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    results, means = on_two_ranks(body, args)
    hand, ours = statistics.median(results["hand"]), statistics.median(results["trainer"])
    paired = statistics.median(o / h for o, h in zip(results["trainer"], results["hand"]))
    with_ckpt = statistics.median(means["trainer+ckpt"])
    means_ratio = statistics.median(c / o for c, o in zip(means["trainer+ckpt"], means["trainer"]))
    every = CheckpointConfig().every_steps
    print(
        f"model: MLP 64->{args.hidden}x3->1, global batch {args.batch}, 2 ranks gloo, "
        f"{args.rounds} rounds x {args.steps} steps"
    )
    print(f"hand-written DDP loop median step {hand * 1e3:8.2f} ms")
    print(f"neural_arch trainer   median step {ours * 1e3:8.2f} ms (checkpoints off)")
    print(f"step-time ratio trainer/hand: {ours / hand:.3f} (median of per-round ratios {paired:.3f}; target <= 1.03)")
    print(
        f"with a checkpoint every {every} steps (the default): mean step {with_ckpt * 1e3:.2f} ms vs "
        f"{statistics.median(means['trainer']) * 1e3:.2f} ms without; checkpointing costs "
        f"{means_ratio - 1:.1%} of step time (per-round median), i.e. {(means_ratio - 1) * every:.2f} steps per save"
    )


if __name__ == "__main__":
    main()
