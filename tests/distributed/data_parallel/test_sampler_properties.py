"""Properties of ``DistributedSampler`` for any dataset size, world size, global batch and seed.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_sampler_properties.py -q``
The reference is the epoch's global order (``torch.randperm`` seeded with seed + epoch, as
torch's own sampler draws it), computed here independently of the sampler.
"""

import torch
from hypothesis import given
from hypothesis import strategies as st

from neural_arch.distributed import DistributedSampler
from tests.helpers.property_settings import PROPERTY

sizes = st.integers(0, 120)
worlds = st.integers(1, 8)
batches = st.integers(1, 40)
seeds = st.integers(0, 2**31 - 1)


def ranks(n: int, world: int, **kwargs) -> list[DistributedSampler]:
    return [DistributedSampler(dataset_size=n, num_replicas=world, rank=r, **kwargs) for r in range(world)]


def reference(n: int, seed: int, epoch: int, shuffle: bool) -> list[int]:
    if not shuffle:
        return list(range(n))
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(n, generator=generator).tolist()


def global_batches(samplers: list[DistributedSampler]) -> list[list[int]]:
    """Each global batch back from the ranks' strided shares (rank r holds items r, r+W, ...)."""
    per_rank = [list(s) for s in samplers]
    assert len({len(b) for b in per_rank}) == 1, "every rank yields the same number of batches"
    world, out = len(samplers), []
    for shares in zip(*per_rank):
        size = shares[0].global_size
        assert all(share.global_size == size for share in shares) and sum(map(len, shares)) == size
        out.append([shares[i % world][i // world] for i in range(size)])
    return out


@PROPERTY
@given(n=sizes, world=worlds, seed=seeds, epoch=st.integers(0, 5), shuffle=st.booleans(), drop_last=st.booleans())
def test_every_sample_once_per_epoch(n, world, seed, epoch, shuffle, drop_last):
    samplers = ranks(n, world, seed=seed, shuffle=shuffle, drop_last=drop_last)
    for s in samplers:
        s.set_epoch(epoch)
    taken = [i for s in samplers for i in s]
    used = n - n % world if drop_last else n
    order = reference(n, seed, epoch, shuffle)
    assert sorted(taken) == sorted(order[:used]) and len(set(taken)) == len(taken)
    assert [list(s) for s in samplers] == [order[r:used:world] for r in range(world)]  # strided, as in the C++ loop


@PROPERTY
@given(n=sizes, world=worlds, batch=batches, seed=seeds, shuffle=st.booleans(), drop_last=st.booleans())
def test_global_batches_do_not_depend_on_world_size(n, world, batch, seed, shuffle, drop_last):
    got = global_batches(ranks(n, world, seed=seed, shuffle=shuffle, drop_last=drop_last, batch_size=batch))
    used = n - n % batch if drop_last else n
    order = reference(n, seed, 0, shuffle)[:used]
    assert got == [order[k : k + batch] for k in range(0, used, batch)]


@PROPERTY
@given(
    n=sizes,
    before=worlds,
    after=worlds,
    batch=batches,
    seed=seeds,
    shuffle=st.booleans(),
    cut=st.floats(0, 1),
    epoch=st.integers(0, 3),
)
def test_resume_anywhere_on_any_world_size_continues_the_sequence(n, before, after, batch, seed, shuffle, cut, epoch):
    """Stop after k global batches on ``before`` ranks; resume from rank 0's state on ``after``
    ranks: the two parts are the uninterrupted epoch, no sample skipped or repeated."""
    whole = reference(n, seed, epoch, shuffle)
    expected = [whole[k : k + batch] for k in range(0, n, batch)]
    k = round(cut * len(expected))
    first = ranks(n, before, seed=seed, shuffle=shuffle, batch_size=batch)
    for s in first:
        s.set_epoch(epoch)
        iterator = iter(s)
        for _ in range(k):
            next(iterator)
    states = [s.state_dict() for s in first]
    assert all(state == states[0] for state in states), "the position is global: every rank saves the same"
    second = ranks(n, after, seed=seed, shuffle=shuffle, batch_size=batch)
    for s in second:
        s.load_state_dict(states[0])
        s.set_epoch(epoch)  # what a trainer does on resume: keeps the restored position
    assert global_batches(second) == expected[k:]
    for s in second:  # the next epoch is whole again
        s.set_epoch(epoch + 1)
    following = reference(n, seed, epoch + 1, shuffle)
    assert global_batches(second) == [following[i : i + batch] for i in range(0, n, batch)]
