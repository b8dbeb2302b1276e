"""Where the sea-ice model's 2-rank step goes: its own work, the all-reduce, and the wait for the peer.

Run: ``.venv/bin/python -m benchmarks.sea_ice_scaling.icenet_sync [--rounds 3 --steps 150]``

``icenet_scaling.py`` shows 2 processes below 1.8x one process; this script splits a step
to say why. On the real task (configs/icenet.yaml's U-Net and data, created in a temporary
folder) and the same sampled batches, per step and per rank it times:

- ``compute``: forward, the task's loss and backward of the plain model (no DDP), on the
  rank's 8 samples (2 ranks, a core each, 1 thread) or on 16 and on 8 in one process;
- ``all-reduce``: the flat all-reduce of the gradients that follows (0.53 MB over gloo,
  what DDP's single bucket sends), which returns only when the slower rank has sent its part;
- ``back to back``: the same all-reduce repeated with both ranks already waiting, i.e. what
  the bytes cost without the wait.

Rounds interleave one process and two. It prints per round: one process's step at 16
samples; per rank the median and spread of ``compute`` (the batches are the same in every
round, so their spread is the machine's), how far apart the two ranks finish, the all-reduce
inside the step and back to back; the 2-rank step (compute + all-reduce, median) and its
speedup over one process at 16; and the speedup the same compute would give with an
all-reduce that never waits. The optimizer step (the same work either way) is left out.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from benchmarks.common.two_ranks import on_ranks
from benchmarks.sea_ice_scaling.icenet_scaling import GLOBAL_BATCH, create_data
from neural_arch.apps.icenet.task import IceNetTask
from neural_arch.distributed import DistributedSampler
from neural_arch.training.config import load_config


def batches(task: IceNetTask, batch: int, rank: int, world: int, steps: int) -> list[dict[str, torch.Tensor]]:
    """The first ``steps`` training batches of this rank's share (the sampler's order; repeated
    once an epoch is used up), built before any timing."""
    sampler = DistributedSampler(dataset_size=task.train_size, batch_size=batch, seed=0, rank=rank, num_replicas=world)
    built = [task.batch("train", torch.tensor(ids, dtype=torch.long), torch.device("cpu")) for ids in sampler]
    return [built[i % len(built)] for i in range(steps)]


def compute(task: IceNetTask, model: torch.nn.Module, rows: dict[str, torch.Tensor]) -> float:
    """Seconds for one forward, loss and backward of the plain model."""
    for p in model.parameters():
        p.grad = None
    begun = time.perf_counter()
    task.loss(model, rows).mean().backward()
    return time.perf_counter() - begun


def body(rank: int, args: argparse.Namespace) -> dict[str, list[float]]:
    """Per-step milliseconds on this rank; rank 0 returns every rank's (gathered)."""
    world = dist.get_world_size()
    cfg = load_config("configs/icenet.yaml", [f"data.path={args.data}", f"run.dir={args.data}.run"], world_size=world)
    task = IceNetTask(cfg)
    task.prepare()
    torch.manual_seed(0)
    model = task.build_model()
    if world == 1:  # one process: the whole batch, and half of it (what one of two ranks computes)
        whole, half = batches(task, GLOBAL_BATCH, 0, 1, args.steps), batches(task, GLOBAL_BATCH // 2, 0, 1, args.steps)
        return {
            "step16": [compute(task, model, b) * 1e3 for b in whole][args.warmup :],
            "step8": [compute(task, model, b) * 1e3 for b in half][args.warmup :],
        }
    params = list(model.parameters())
    times: dict[str, list[float]] = {"compute": [], "allreduce": [], "back_to_back": []}
    for rows in batches(task, GLOBAL_BATCH, rank, world, args.steps):
        times["compute"].append(compute(task, model, rows) * 1e3)
        begun = time.perf_counter()
        dist.all_reduce(torch.cat([p.grad.reshape(-1) for p in params]))
        times["allreduce"].append((time.perf_counter() - begun) * 1e3)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.barrier()
    for _ in range(args.steps):
        begun = time.perf_counter()
        dist.all_reduce(flat)
        times["back_to_back"].append((time.perf_counter() - begun) * 1e3)
    gathered: dict[str, list[float]] = {}
    for name, values in times.items():
        mine = torch.tensor(values[args.warmup :], dtype=torch.float64)
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        gathered.update({f"{name}{r}": t.tolist() for r, t in enumerate(every)})
    return gathered


def report_round(r: int, one: dict[str, list[float]], two: dict[str, list[float]]) -> float:
    """Print one round; returns the 2-rank speedup over one process at 16 samples."""
    med = statistics.median
    t16, t8 = med(one["step16"]), med(one["step8"])
    c0, c1 = two["compute0"], two["compute1"]
    apart = med(abs(a - b) for a, b in zip(c0, c1))
    step = med(a + b for a, b in zip(c0, two["allreduce0"]))
    steady = max(med(c0), med(c1)) + med(two["back_to_back0"])
    print(
        f"round {r + 1}: 1 process {t16:5.1f} ms at 16 samples, {t8:5.1f} ms at 8 | 2 ranks: compute "
        f"{med(c0):5.1f} / {med(c1):5.1f} ms (spread {statistics.pstdev(c0):4.1f} / {statistics.pstdev(c1):4.1f}), "
        f"finish {apart:4.1f} ms apart; all-reduce {med(two['allreduce0']):4.1f} / {med(two['allreduce1']):4.1f} ms "
        f"in the step, {med(two['back_to_back0']):4.2f} back to back",
        flush=True,
    )
    print(
        f"         2-rank step {step:5.1f} ms: {t16 / step:4.2f}x one process (target 1.8); with an all-reduce "
        f"that never waits {t16 / steady:4.2f}x; 8 samples alone {t16 / t8:4.2f}x",
        flush=True,
    )
    return t16 / step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20, help="first steps of each run left out")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")
    speedups = []
    with tempfile.TemporaryDirectory() as tmp:
        args.data = str(Path(tmp) / "icenet.zarr")
        create_data(Path(args.data))
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            got = {world: on_ranks(body, args, world=world) for world in order}
            speedups.append(report_round(r, got[1], got[2]))
    print(
        f"\nmedian 2-rank speedup {statistics.median(speedups):.2f}x over {args.rounds} rounds of {args.steps} steps "
        f"({args.warmup} left out)"
    )


if __name__ == "__main__":
    main()
