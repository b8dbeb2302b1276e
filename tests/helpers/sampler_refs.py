"""The sampler tests' shared pieces: W samplers side by side, and the independent references.

Use: ``from tests.helpers.sampler_refs import samplers, shares, reference_order, interleave``;
``interleave(shares(n, 3, seed=s))`` is the global order the three ranks' shares make up.
"""

from __future__ import annotations

from typing import Any

import torch

from neural_arch.distributed import DistributedSampler


def samplers(n: int, world_size: int, **kwargs: Any) -> list[DistributedSampler]:
    """One ``DistributedSampler`` of ``n`` samples per rank of ``world_size``, built alike."""
    return [DistributedSampler(dataset_size=n, num_replicas=world_size, rank=r, **kwargs) for r in range(world_size)]


def shares(n: int, world_size: int, epoch: int = 0, **kwargs: Any) -> list[list[int]]:
    """Every rank's sample ids for ``epoch``, rank 0 first."""
    out = []
    for s in samplers(n, world_size, **kwargs):
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def reference_order(n: int, seed: int, epoch: int) -> list[int]:
    """The epoch's global order as torch's own sampler draws it (``randperm`` seeded with seed + epoch)."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(n, generator=g).tolist()


def interleave(rank_shares: list[list[int]]) -> list[int]:
    """Global order back from strided shares: position i is rank i % W's (i // W)-th item."""
    world_size = len(rank_shares)
    total = sum(len(s) for s in rank_shares)
    return [rank_shares[i % world_size][i // world_size] for i in range(total)]
