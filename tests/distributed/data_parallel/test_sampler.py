"""DistributedSampler: exact coverage, world-size-invariant order and batches, resume anywhere.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_sampler.py -q``

Almost everything here is single-process: the sampler takes ``num_replicas``/``rank``
explicitly, so "world size W" means W samplers built side by side and consumed in
lockstep, as W ranks would. References are independent of the code under test: the C++
loop ``for (i = rank; i < n; i += size)``, ``torch.randperm`` seeded ``seed + epoch``, and
``torch.utils.data.DistributedSampler`` itself.
"""

import numpy as np
import pytest
import torch
import torch.utils.data as tud

from neural_arch.distributed import DistributedSampler, IndexBatch, init_process_group
from tests.helpers.multiproc import run_ranks
from tests.helpers.sampler_refs import interleave, reference_order, samplers, shares

# --- coverage and order ------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [0, 2, 12, 13, 23])
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_epoch_uses_every_sample_exactly_once(world_size, n, shuffle):
    for epoch in (0, 1):
        got = shares(n, world_size, epoch=epoch, shuffle=shuffle, seed=7)
        flat = [i for share in got for i in share]
        assert sorted(flat) == list(range(n)), "a sample is missing, duplicated or padded"
        for r, share in enumerate(got):
            assert len(share) == len(range(r, n, world_size))  # counts differ by at most one
            assert all(isinstance(i, int) for i in share)
        for s, share in zip(samplers(n, world_size, shuffle=shuffle, seed=7), got):
            assert len(s) == len(share) == s.num_samples


@pytest.mark.parametrize("n,world_size", [(10, 3), (12, 4), (5, 1), (2, 4), (7, 2)])
def test_no_shuffle_is_the_cpp_loop(n, world_size):
    for rank, share in enumerate(shares(n, world_size, shuffle=False)):
        cpp = []
        i = rank
        while i < n:  # for (i = rank; i < n; i += size)
            cpp.append(i)
            i += world_size
        assert share == cpp


@pytest.mark.parametrize("seed,epoch", [(0, 0), (0, 3), (42, 1)])
def test_order_is_torch_distributed_samplers_permutation(seed, epoch):
    n = 24
    order = reference_order(n, seed, epoch)
    ours = DistributedSampler(dataset_size=n, num_replicas=1, rank=0, seed=seed)
    ours.set_epoch(epoch)
    assert ours.global_order().tolist() == order
    assert list(ours) == order
    for world_size in (1, 2, 3, 4):  # divisible: torch pads nothing, so shares must be equal
        for rank, share in enumerate(shares(n, world_size, epoch=epoch, seed=seed)):
            theirs = tud.DistributedSampler(range(n), num_replicas=world_size, rank=rank, seed=seed)
            theirs.set_epoch(epoch)
            assert share == list(theirs) == order[rank::world_size]


def test_order_depends_only_on_seed_and_epoch():
    n = 23
    base = list(DistributedSampler(list(range(n)), num_replicas=1, rank=0, seed=3))
    for world_size in (2, 3, 4):
        assert interleave(shares(n, world_size, seed=3)) == base
    assert interleave(shares(n, 3, seed=3)) == interleave(shares(n, 3, seed=3))  # deterministic
    s = DistributedSampler(dataset_size=n, num_replicas=1, rank=0, seed=3)
    s.set_epoch(1)
    epoch1 = list(s)
    assert sorted(epoch1) == sorted(base) and epoch1 != base, "set_epoch must change the order"
    s.set_epoch(0)
    assert list(s) == base, "going back to epoch 0 must give epoch 0's order"
    assert list(DistributedSampler(dataset_size=n, num_replicas=1, rank=0, seed=4)) != base
    assert epoch1 == reference_order(n, 3, 1)


def test_drop_last_per_sample_matches_torch():
    n, world_size = 11, 3
    got = shares(n, world_size, drop_last=True, seed=5)
    assert sum(len(s) for s in got) == 9
    for rank, share in enumerate(got):
        theirs = tud.DistributedSampler(range(n), num_replicas=world_size, rank=rank, seed=5, drop_last=True)
        assert share == list(theirs)


# --- batch mode ----------------------------------------------------------------------


def batch_shares(n, world_size, batch_size, epoch=0, **kwargs):
    out = []
    for s in samplers(n, world_size, batch_size=batch_size, **kwargs):
        s.set_epoch(epoch)
        out.append(list(s))
    return out


@pytest.mark.parametrize("n,batch_size", [(11, 4), (9, 4), (12, 3), (2, 5)])
def test_global_batches_are_the_same_at_every_world_size(n, batch_size):
    order = reference_order(n, 1, 2)
    expected = [order[k : k + batch_size] for k in range(0, n, batch_size)]
    for world_size in (1, 2, 3):
        got = batch_shares(n, world_size, batch_size, epoch=2, seed=1)
        assert [len(b) for b in got] == [len(expected)] * world_size, "ranks yield different batch counts"
        for s, per_rank in zip(samplers(n, world_size, batch_size=batch_size, seed=1), got):
            assert len(s) == len(per_rank)
        for k, chunk in enumerate(expected):
            for rank in range(world_size):
                batch = got[rank][k]
                assert isinstance(batch, IndexBatch)
                assert batch == chunk[rank::world_size], "shares must be strided slices"
                assert batch.global_size == len(chunk)
            union = [i for rank in range(world_size) for i in got[rank][k]]
            assert sorted(union) == sorted(chunk), f"global batch {k} differs at world size {world_size}"


def test_short_last_batch_gives_empty_shares():
    got = batch_shares(9, 3, 4, shuffle=False)  # last global batch is [8]: ranks 1 and 2 get none
    assert [b[-1] for b in got] == [[8], [], []]
    assert [b[-1].global_size for b in got] == [1, 1, 1]
    assert all(len(b) == 3 for b in got)


def test_drop_last_drops_only_the_incomplete_global_batch():
    got = batch_shares(11, 2, 4, drop_last=True, shuffle=False)
    assert got == [[[0, 2], [4, 6]], [[1, 3], [5, 7]]]
    assert all(b.global_size == 4 for per_rank in got for b in per_rank)
    complete = batch_shares(12, 2, 4, drop_last=True, shuffle=False)
    assert [len(b) for b in complete] == [3, 3], "a complete last batch must be kept"
    s = DistributedSampler(dataset_size=11, num_replicas=2, rank=0, batch_size=4, drop_last=True)
    assert len(s) == 2 and s.samples_per_epoch == 8


# --- with torch's DataLoader ------------------------------------------------------


def test_works_as_dataloader_sampler_and_batch_sampler():
    n = 14
    data = tud.TensorDataset(torch.arange(n) * 10)
    seen = []
    for s in samplers(n, 3, seed=2):
        loader = tud.DataLoader(data, batch_size=2, sampler=s)
        values = [int(v) for (batch,) in loader for v in batch]
        assert values == [10 * i for i in list(s)]
        assert len(loader) == -(-len(s) // 2)
        seen += values
    assert sorted(seen) == [10 * i for i in range(n)]

    seen = []
    for s in samplers(12, 2, batch_size=4, seed=2):  # 12 = 3 full global batches: no empty share
        loader = tud.DataLoader(data, batch_sampler=s)
        batches = [batch.tolist() for (batch,) in loader]
        assert batches == [[10 * i for i in b] for b in s]
        assert len(batches) == len(loader) == 3
        seen += [v for b in batches for v in b]
    assert sorted(seen) == [10 * i for i in range(12)]


def test_numpy_and_tensor_integers_are_accepted():
    s = DistributedSampler(dataset_size=np.int64(10), num_replicas=np.int32(2), rank=np.int64(1), seed=1)
    s.set_epoch(np.arange(3)[2])  # `for epoch in np.arange(n)`
    assert list(s) == reference_order(10, 1, 2)[1::2]
    s.load_state_dict({"epoch": torch.tensor(2), "position": torch.tensor(4), "seed": 1, "dataset_size": 10})
    assert list(s) == reference_order(10, 1, 2)[5::2]


# --- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(dataset=[1, 2], dataset_size=5), ["exactly one", "dataset_size=5"]),
        (dict(), ["exactly one", "dataset_size=None"]),
        (dict(dataset_size=-1), ["dataset_size=-1", ">= 0"]),
        (dict(dataset_size=4, num_replicas=3, rank=3), ["rank=3", "num_replicas=3"]),
        (dict(dataset_size=4, num_replicas=2, rank=-1), ["rank=-1"]),
        (dict(dataset_size=4, num_replicas=0, rank=0), ["num_replicas=0", ">= 1"]),
        (dict(dataset_size=4, num_replicas=1, rank=0, batch_size=0), ["batch_size=0"]),
        (dict(dataset_size=4.0, num_replicas=1, rank=0), ["dataset_size=4.0"]),
    ],
)
def test_bad_arguments_name_the_value(kwargs, words):
    with pytest.raises(ValueError) as info:
        DistributedSampler(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_bad_epoch_and_state_name_the_value():
    s = DistributedSampler(dataset_size=10, num_replicas=2, rank=0, seed=1)
    for epoch in (-1, 1.5):
        with pytest.raises(ValueError, match=f"epoch={epoch}"):
            s.set_epoch(epoch)
    good = s.state_dict()
    for key, value, words in [
        ("seed", 2, ["seed=2", "seed=1"]),
        ("dataset_size", 11, ["dataset_size=11", "dataset_size=10"]),
        ("shuffle", False, ["shuffle=False"]),
        ("drop_last", True, ["drop_last=True"]),
        ("position", 12, ["position 12", "10 samples"]),
        ("position", 2.5, ["position=2.5"]),
        ("position", -3, ["position=-3"]),
    ]:
        with pytest.raises(ValueError) as info:
            s.load_state_dict(dict(good, **{key: value}))
        for word in words:
            assert word in str(info.value)
    assert s.state_dict() == good, "a rejected state must not change the sampler"


# --- defaults from the process group ---------------------------------------------


def default_rank_worker(rank, world_size):
    init_process_group(backend="gloo")
    s = DistributedSampler(dataset_size=5, shuffle=False)
    return s.rank, s.num_replicas, list(s)


@pytest.mark.multiprocess
def test_rank_and_world_size_default_to_the_process_group():
    assert DistributedSampler(dataset_size=3, shuffle=False).num_replicas == 1  # no group: world size 1
    assert run_ranks(default_rank_worker, 2, timeout=60) == [(0, 2, [0, 2, 4]), (1, 2, [1, 3])]
