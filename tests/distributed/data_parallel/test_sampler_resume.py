"""DistributedSampler resume: the global position restores at any world size, without
skipping or repeating a sample, and a finished epoch is not replayed.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_sampler_resume.py -q``
"""

import pytest

from neural_arch.distributed import DistributedSampler
from tests.helpers.sampler_refs import interleave, reference_order, samplers


def consume(world_size, n, steps, batch_size=None, epoch=1):
    """Run W ranks in lockstep for ``steps`` items; return (all consumed indices, states)."""
    ranks = samplers(n, world_size, batch_size=batch_size, seed=9)
    iters = []
    for s in ranks:
        s.set_epoch(epoch)
        iters.append(iter(s))
    consumed = []
    for _ in range(steps):
        for it in iters:
            item = next(it)
            consumed += list(item) if batch_size else [item]
    states = [s.state_dict() for s in ranks]
    return consumed, states


@pytest.mark.parametrize("batch_size", [None, 5])
@pytest.mark.parametrize("old_size,new_size", [(2, 1), (2, 3), (2, 4), (3, 2)])
def test_resume_on_another_world_size_neither_skips_nor_repeats(batch_size, old_size, new_size):
    n, steps = 23, 2
    consumed, states = consume(old_size, n, steps, batch_size)
    assert all(st == states[0] for st in states), "ranks disagree on the global position"
    assert states[0]["epoch"] == 1 and states[0]["position"] == len(consumed)
    order = reference_order(n, 9, 1)
    assert sorted(consumed) == sorted(order[: len(consumed)])

    before_len = []
    rest = []
    for s in samplers(n, new_size, batch_size=batch_size, seed=9):
        s.load_state_dict(states[0])
        s.set_epoch(1)  # a training loop re-selects the epoch it resumes: keeps the position
        before_len.append(len(s))
        rest.append(list(s))
    assert [len(r) for r in rest] == before_len, "len() must count what the resumed iteration yields"
    if batch_size:
        assert len({len(r) for r in rest}) == 1, "ranks yield different batch counts after resume"
        # the remaining global batches are the fixed slices of the order, at the new world size
        pos = len(consumed)
        for k in range(len(rest[0])):
            chunk = order[pos + k * batch_size : pos + (k + 1) * batch_size]
            assert [rest[r][k] for r in range(new_size)] == [chunk[r::new_size] for r in range(new_size)]
        resumed = [i for per_rank in rest for b in per_rank for i in b]
    else:
        resumed = [i for per_rank in rest for i in per_rank]
        assert interleave(rest) == order[len(consumed) :]
    assert not set(consumed) & set(resumed), "a sample was repeated after resume"
    assert sorted(consumed + resumed) == list(range(n)), "a sample was skipped after resume"


def test_position_resets_on_new_epoch_and_restarts_after_full_epoch():
    s = DistributedSampler(dataset_size=10, num_replicas=2, rank=1, seed=4)
    full = list(s)
    assert list(s) == full, "iterating again after a full epoch must restart it"
    it = iter(s)
    next(it), next(it)
    assert len(s) == 3
    s.set_epoch(0)  # same epoch: position kept
    assert len(s) == 3 and list(s) == full[2:]
    it = iter(s)
    next(it)
    s.set_epoch(1)  # new epoch: from the start
    assert len(s) == 5
    assert list(s) == reference_order(10, 4, 1)[1::2]


def test_state_saved_at_end_of_epoch_does_not_replay_it():
    done = DistributedSampler(dataset_size=6, num_replicas=2, rank=0, shuffle=False)
    list(done)
    state = done.state_dict()
    resumed = DistributedSampler(dataset_size=6, num_replicas=3, rank=0, shuffle=False)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)
    assert len(resumed) == 0 and list(resumed) == [], "a finished epoch was replayed"
    assert list(resumed) == [0, 3], "after that, iterating again is a fresh pass"
    # drop_last at 2 ranks then 4: position 8 of 10 is the end of the epoch at 4 ranks
    old = samplers(10, 2, drop_last=True, shuffle=False)
    iters = [iter(s) for s in old]
    consumed = [next(it) for _ in range(4) for it in iters]
    new = samplers(10, 4, drop_last=True, shuffle=False)
    for s in new:
        s.load_state_dict(old[0].state_dict())
    assert consumed == list(range(8)) and [list(s) for s in new] == [[]] * 4
