"""A user's own training script, float64: ``python ray_user_script.py OUT [EPOCHS]`` on one process,
or on N under a launcher, torchrun or Ray Train (``script_loop_per_worker``).

A DDP MLP on 101 samples in global batches of 12 (every epoch ends with a 5-sample batch: 3 + 2
on two ranks), exact ``global_batch_loss`` weighting, SGD with momentum; it resumes from its
newest checkpoint in OUT/checkpoints if there is one, saves every epoch with ``save_checkpoint``,
and rank 0 writes OUT/losses.json (each epoch's exact global mean loss). The weights are in the
newest checkpoint. Nothing in it knows about Ray.
"""

import json
import sys
from pathlib import Path

import torch
from torch import nn

import neural_arch.distributed as nd

SAMPLES, BATCH = 101, 12


def main() -> None:
    out, epochs = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3
    nd.init_process_group()
    rank, world = nd.get_rank(), nd.get_world_size()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, 4, generator=g, dtype=torch.float64)
    y = torch.sin(x[:, :1]) + 0.1 * x[:, 1:2] * x[:, 2:3]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1)).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ddp = nd.DistributedDataParallel(model)
    sampler = nd.DistributedSampler(dataset_size=SAMPLES, num_replicas=world, rank=rank, batch_size=BATCH, seed=3)
    start, losses = 0, []
    found = nd.load_checkpoint(out / "checkpoints")
    if found is not None:
        model.load_state_dict(found[1]["model"])
        opt.load_state_dict(found[1]["optimizer"])
        start, losses = found[1]["epoch"] + 1, found[1]["losses"]
    for epoch in range(start, epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, dtype=torch.float64)
        for batch in sampler:
            per_sample = ((ddp(x[batch]) - y[batch]) ** 2).sum(dim=1)
            opt.zero_grad()
            nd.global_batch_loss(per_sample, batch.global_size).backward()
            opt.step()
            total += torch.stack([per_sample.detach().sum(), torch.tensor(float(len(batch)), dtype=torch.float64)])
        total = nd.all_reduce(total)
        losses.append(float(total[0] / total[1]))
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch, "losses": losses}
        nd.save_checkpoint(out / "checkpoints", epoch, state)
    if rank == 0:
        (out / "losses.json").write_text(json.dumps(losses))


if __name__ == "__main__":
    main()
