"""Collectives vs a numpy reference at world sizes 1, 2, 3, on tensors and arrays.

Run: ``.venv/bin/python -m pytest tests/distributed/runtime/test_collectives.py``
"""

import numpy as np
import pytest
import torch

from neural_arch.distributed import (
    ReduceOp,
    all_gather,
    all_reduce,
    broadcast,
    init_process_group,
    reduce_scatter,
)
from tests.helpers.multiproc import RankFailed, run_ranks

pytestmark = pytest.mark.multiprocess  # every test here spawns ranks or runs a launcher/scheduler

OPS = {
    ReduceOp.SUM: lambda xs: np.sum(xs, axis=0),
    ReduceOp.AVERAGE: lambda xs: np.mean(xs, axis=0),
    ReduceOp.MAX: lambda xs: np.max(xs, axis=0),
    ReduceOp.MIN: lambda xs: np.min(xs, axis=0),
    ReduceOp.PRODUCT: lambda xs: np.prod(xs, axis=0),
}


def local_data(rank: int, rows: int = 6) -> np.ndarray:
    return np.random.default_rng(100 + rank).normal(size=(rows, 3))


def collectives_worker(rank, world_size):
    init_process_group(backend="gloo")
    out = {}
    x = local_data(rank)
    for op in ReduceOp:
        out[("all_reduce", op.name, "numpy")] = all_reduce(x, op)
        t = all_reduce(torch.from_numpy(x), op)
        assert isinstance(t, torch.Tensor)
        out[("all_reduce", op.name, "torch")] = t.numpy()
        out[("reduce_scatter", op.name, "numpy")] = reduce_scatter(x[: 2 * world_size], op)
        out[("reduce_scatter", op.name, "torch")] = reduce_scatter(torch.from_numpy(x[: 2 * world_size]), op).numpy()
    out["int_sum"] = all_reduce(np.arange(4) + rank, "sum")
    out["int_avg"] = all_reduce(torch.arange(4) + rank, ReduceOp.AVERAGE).numpy()
    src = world_size - 1
    out["broadcast"] = broadcast(x, src=src)
    out["broadcast_torch"] = broadcast(torch.from_numpy(x), src=src).numpy()
    ragged = local_data(rank, rows=rank + 1 if rank != 1 else 0)  # rank 1 contributes nothing
    out["all_gather"] = all_gather(ragged)
    out["all_gather_torch"] = [t.numpy() for t in all_gather(torch.from_numpy(ragged))]
    out["scalar_gather"] = [float(t) for t in all_gather(torch.tensor(float(rank)))]
    out["untouched"] = np.array_equal(x, local_data(rank))
    return out


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_collectives_match_numpy(world_size):
    results = run_ranks(collectives_worker, world_size)
    xs = np.stack([local_data(r) for r in range(world_size)])
    for rank, out in enumerate(results):
        assert out["untouched"]
        for op, ref in OPS.items():
            for kind in ("numpy", "torch"):
                np.testing.assert_allclose(out[("all_reduce", op.name, kind)], ref(xs), rtol=1e-12, atol=0)
                chunk = ref(xs[:, : 2 * world_size])[2 * rank : 2 * rank + 2]
                np.testing.assert_allclose(out[("reduce_scatter", op.name, kind)], chunk, rtol=1e-12, atol=0)
        assert isinstance(out[("all_reduce", "SUM", "numpy")], np.ndarray)
        np.testing.assert_array_equal(out["int_sum"], sum(np.arange(4) + r for r in range(world_size)))
        np.testing.assert_allclose(out["int_avg"], np.mean([np.arange(4) + r for r in range(world_size)], axis=0))
        np.testing.assert_array_equal(out["broadcast"], local_data(world_size - 1))
        np.testing.assert_array_equal(out["broadcast_torch"], local_data(world_size - 1))
        expected = [local_data(r, rows=r + 1 if r != 1 else 0) for r in range(world_size)]
        for key in ("all_gather", "all_gather_torch"):
            assert len(out[key]) == world_size
            for got, want in zip(out[key], expected):
                np.testing.assert_array_equal(got, want)
        assert out["scalar_gather"] == [float(r) for r in range(world_size)]


def identity_worker(rank, world_size):
    # No process group at all: collectives are identities.
    x = np.array([1.0, 2.0, 3.0])
    return (
        all_reduce(x).tolist(),
        [a.tolist() for a in all_gather(x)],
        broadcast(x).tolist(),
        reduce_scatter(torch.tensor([4.0]), "average").tolist(),
    )


def test_without_process_group_collectives_are_identities():
    assert identity_worker(0, 1) == ([1.0, 2.0, 3.0], [[1.0, 2.0, 3.0]], [1.0, 2.0, 3.0], [4.0])


def mismatch_worker(rank, world_size, kind):
    init_process_group(backend="gloo", timeout=20)
    x = torch.zeros(3 + rank)
    try:
        if kind == "shape":
            all_reduce(x)
        elif kind == "dtype":
            all_reduce(torch.zeros(3, dtype=torch.float64 if rank else torch.float32))
        elif kind == "collective":
            broadcast(torch.zeros(3)) if rank == 0 else all_reduce(torch.zeros(3))
        elif kind == "gather_trailing":
            all_gather(torch.zeros(2, 2 + rank))
    except ValueError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("kind", ["shape", "dtype", "collective", "gather_trailing"])
def test_mismatch_is_a_clear_error_on_every_rank(kind):
    messages = run_ranks(mismatch_worker, 2, args=(kind,), timeout=60)
    for msg in messages:
        assert msg is not None, "mismatch was not detected"
        assert "rank 0:" in msg and "rank 1:" in msg
    if kind == "shape":
        assert "(3,)" in messages[0] and "(4,)" in messages[0]


def bad_input_worker(rank, world_size):
    init_process_group(backend="gloo")
    errors = []
    for call in (
        lambda: reduce_scatter(torch.zeros(3)),
        lambda: broadcast(torch.zeros(1), src=5),
        lambda: all_reduce([1, 2]),
        lambda: all_reduce(torch.zeros(1), op="median"),
    ):
        try:
            call()
        except ValueError as exc:
            errors.append(str(exc))
    return errors


def test_bad_arguments_raise_value_error():
    for errors in run_ranks(bad_input_worker, 2):
        assert len(errors) == 4
        assert "divisible by the world size 2" in errors[0]
        assert "src=5" in errors[1]


def test_run_ranks_reports_the_failing_rank():
    with pytest.raises(RankFailed, match="rank 1 failed"):
        run_ranks(_fail_on_rank_1, 2)


def _fail_on_rank_1(rank, world_size):
    if rank == 1:
        raise RuntimeError("boom")
    return rank
