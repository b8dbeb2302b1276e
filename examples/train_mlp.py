"""Train a small MLP on 2 processes and show it equals one process, exactly.

Run: ``.venv/bin/python -m neural_arch.distributed.launcher --nproc_per_node=2 --rank0_only examples/train_mlp.py``,
the same under ``torchrun --nproc_per_node=2``, or ``python examples/train_mlp.py`` for one process.
(The hpc/ job scripts run it by default.)

Every rank trains a DistributedDataParallel MLP on its share of each global batch (the
world-size-invariant DistributedSampler, exact global_batch_loss weighting; the dataset
size leaves an uneven last batch). Rank 0 then trains the same model in a single process
on the same global batches and prints the largest parameter difference.
"""

from __future__ import annotations

import time

import torch
from torch import nn

import neural_arch.distributed as nd

SAMPLES, GLOBAL_BATCH, EPOCHS, LR = 1003, 64, 8, 0.05


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)).double()


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(42)
    x = torch.randn(SAMPLES, 8, generator=g, dtype=torch.float64)
    y = (
        torch.sin(x[:, :1] * 2)
        + 0.5 * x[:, 1:2] * x[:, 2:3]
        + 0.05 * torch.randn(SAMPLES, 1, generator=g, dtype=torch.float64)
    )
    return x, y


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, rank: int, world: int) -> list[float]:
    """Train; returns the exact global mean training loss of each epoch."""
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    sampler = nd.DistributedSampler(
        dataset_size=SAMPLES, num_replicas=world, rank=rank, batch_size=GLOBAL_BATCH, seed=3
    )
    history = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, dtype=torch.float64)  # (loss sum, samples) on this rank
        for batch in sampler:
            per_sample = ((model(x[batch]) - y[batch]) ** 2).sum(dim=1)
            opt.zero_grad()
            # Distributed: sum * world / global count, so DDP's average is the global mean.
            # The single-process reference uses the plain mean, as anyone would.
            loss = nd.global_batch_loss(per_sample, batch.global_size) if world > 1 else per_sample.mean()
            loss.backward()
            opt.step()
            total += torch.tensor([per_sample.sum().item(), len(batch)], dtype=torch.float64)
        if world > 1:
            total = nd.all_reduce(total)
        history.append(float(total[0] / total[1]))
    return history


def main() -> None:
    nd.init_process_group()
    rank, world = nd.get_rank(), nd.get_world_size()
    x, y = make_data()
    start = time.perf_counter()
    model = nd.DistributedDataParallel(make_model())
    history = train(model, x, y, rank, world)
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"trained on {world} process(es), global batch {GLOBAL_BATCH}, {SAMPLES} samples, {elapsed:.1f} s")
        for epoch, loss in enumerate(history):
            print(f"  epoch {epoch}: mean train loss {loss:.5f}")
        reference = make_model()
        ref_history = train(reference, x, y, rank=0, world=1)
        diff = max((a - b).abs().max().item() for a, b in zip(model.module.parameters(), reference.parameters()))
        print(f"single-process reference final loss {ref_history[-1]:.5f}")
        print(f"largest parameter difference, {world} processes vs 1: {diff:.2e} (float64)")
    nd.destroy_process_group()


if __name__ == "__main__":
    main()
