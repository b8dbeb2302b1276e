# Seed 004 "Training Script Template" (CPU), verbatim except the marked fill-ins.
#!/usr/bin/env python3
"""Distributed training script template."""

# --- filled in for the test: a tiny model, dataset, loss and optimizer (not in the seed) ---
import hashlib

import torch
from torch import nn

from neural_arch.distributed import (
    DistributedDataParallel,
    DistributedSampler,
    destroy_process_group,
    get_rank,
    get_world_size,
    init_process_group,
)

torch.manual_seed(0)
num_epochs = 2
dataset = torch.randn(64, 4)
targets = torch.tensor([0.5, -0.5])
criterion = nn.MSELoss()


class MyModel(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

    def forward(self, x):
        return self.net(x)


# --- end of fill-in ---


def main():
    # Initialize distributed training (CPU backend recommended)
    init_process_group(backend="gloo")  # Use "nccl" only if CuPy installed

    world_size = get_world_size()
    rank = get_rank()

    print(f"Process {rank}/{world_size}")

    # Create model (device handling simplified for CPU)
    model = MyModel()
    model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)  # filled in

    # Create distributed dataset sampler
    sampler = DistributedSampler(
        dataset_size=len(dataset),  # Pass size, not dataset
        num_replicas=world_size,
        rank=rank,
    )

    # Training loop
    for epoch in range(num_epochs):
        sampler.set_epoch(epoch)

        for idx in sampler:
            batch = dataset[idx]  # Load data at sampled index

            # Forward pass
            output = model(batch)
            loss = criterion(output, targets)

            # Backward pass with MANUAL gradient sync
            loss.backward()
            model.sync_gradients()  # Required - auto sync not implemented
            optimizer.step()
            optimizer.zero_grad()

    # filled in: every rank must end with the same weights
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    print(f"rank {rank} weights {hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]}", flush=True)
    if rank == 0:  # one long line: two ranks writing it at once to torchrun's shared pipe can interleave
        print(f"rank {rank} values {flat.tolist()}", flush=True)

    # Cleanup
    destroy_process_group()


if __name__ == "__main__":
    main()
