"""Step time of neural_arch's DistributedDataParallel vs raw torch DDP, 2 ranks, interleaved.

Run: ``.venv/bin/python -m benchmarks.overhead.ddp_overhead [--rounds 7 --steps 20 --width 1024]``

Both wrappers train identical copies of the same MLP on the same batches in one job; each
round times ``--steps`` steps of ours, then of raw ``torch.nn.parallel.DistributedDataParallel``
(order alternating per round, so drift hits both equally). Per-step times are taken on
rank 0 between barriers. Prints median step times, the ratio of the medians and the
median of per-round ratios ours / raw (target <= 1.02). Run it on a quiet machine: on 2
cores any other load makes single rounds swing by 30%.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

from benchmarks.common.two_ranks import on_two_ranks
from neural_arch.distributed import DistributedDataParallel


def make_model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def time_steps(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    dist.barrier()
    return (time.perf_counter() - start) / steps


def body(rank: int, args: argparse.Namespace) -> dict[str, list[float]]:
    ours = DistributedDataParallel(make_model(args.width))
    raw = nn.parallel.DistributedDataParallel(make_model(args.width))
    opts = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in (("ours", ours), ("raw", raw))}
    models = {"ours": ours, "raw": raw}
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(args.batch, 256, generator=g), torch.randint(0, 10, (args.batch,), generator=g)
    for name in models:  # warm-up
        time_steps(models[name], opts[name], x, y, 3)
    times: dict[str, list[float]] = {"ours": [], "raw": []}
    for r in range(args.rounds):
        order = ["ours", "raw"] if r % 2 == 0 else ["raw", "ours"]
        for name in order:
            times[name].append(time_steps(models[name], opts[name], x, y, args.steps))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    times = on_two_ranks(body, args)
    ours, raw = statistics.median(times["ours"]), statistics.median(times["raw"])
    params = sum(p.numel() for p in make_model(args.width).parameters())
    print(f"model: MLP {params / 1e6:.2f} M params, batch {args.batch}/rank, 2 ranks gloo, 1 thread each")
    print(f"rounds: {args.rounds} x {args.steps} steps, interleaved")
    print(f"raw torch DDP   median step {raw * 1e3:8.2f} ms")
    print(f"neural_arch DDP median step {ours * 1e3:8.2f} ms")
    paired = statistics.median(o / r for o, r in zip(times["ours"], times["raw"]))
    print(f"ratio of medians ours/raw: {ours / raw:.3f}; median of per-round ratios: {paired:.3f}  (target <= 1.02)")


if __name__ == "__main__":
    main()
