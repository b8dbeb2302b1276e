"""Helpers of the sampler tests: W samplers side by side, and the independent references.

Use: ``from tests.distributed.data_parallel.sampler_refs import samplers, reference_order``.
"""

import torch

from neural_arch.distributed import DistributedSampler


def samplers(n, world_size, **kwargs):
    return [DistributedSampler(dataset_size=n, num_replicas=world_size, rank=r, **kwargs) for r in range(world_size)]


def shares(n, world_size, epoch=0, **kwargs):
    out = []
    for s in samplers(n, world_size, **kwargs):
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def reference_order(n, seed, epoch):
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(n, generator=g).tolist()


def interleave(rank_shares):
    """Global order back from strided shares: position i is rank i % W's (i // W)-th item."""
    world_size = len(rank_shares)
    total = sum(len(s) for s in rank_shares)
    return [rank_shares[i % world_size][i // world_size] for i in range(total)]
