"""global_mean_std across 1, 2, 3 real ranks vs numpy on the concatenated data.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_stats.py -q``

Ranks hold unequal numbers of rows, one of them none (an empty ``(0, F)`` array). The
parent builds every rank's data, so the reference (``numpy.mean`` / ``numpy.std`` of the
concatenation, float64) is computed here, independently of the code under test. Each world
size is spawned once (a module-scoped fixture); the tests below check its results.
"""

import numpy as np
import pytest
import torch

from neural_arch.distributed import global_mean_std, init_process_group
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess  # every test here spawns ranks or runs a launcher/scheduler

ROWS = {1: [9], 2: [0, 7], 3: [4, 0, 9]}  # rank 0 empty at 2 ranks, a middle rank at 3


def make_data(world_size):
    rng = np.random.default_rng(world_size)
    rows = ROWS[world_size]
    return {
        "ordinary": [rng.normal(5.0, 2.0, size=(r, 3)) for r in rows],
        "offset": [1e8 + rng.normal(0.0, 1e-3, size=(10 * r, 4)) for r in rows],
        "images": [rng.normal(1.0, 3.0, size=(r, 2, 3, 4)) for r in rows],  # (n, C, H, W)
        # many features: merging in another order changes the last bit of some of them
        "wide": [rng.normal(3.0, 1.0, size=(r, 512)) for r in rows],
    }


def stats_worker(rank, world_size, data):
    init_process_group(backend="gloo", timeout=30)
    mine = {name: parts[rank] for name, parts in data.items()}
    out = {}
    for name in ("ordinary", "offset"):
        out[name] = global_mean_std(mine[name])
        out[name + "_unbiased"] = global_mean_std(mine[name], unbiased=True)
    t_mean, t_std = global_mean_std(torch.from_numpy(mine["ordinary"]))
    out["torch_types"] = (type(t_mean).__name__, type(t_std).__name__, t_mean.dtype, t_std.dtype)
    out["torch"] = (t_mean.numpy(), t_std.numpy())
    out["numpy_types"] = tuple(type(v).__name__ for v in out["ordinary"])
    f32 = torch.from_numpy(mine["ordinary"]).float()
    out["float32"] = tuple(v.numpy() for v in global_mean_std(f32))
    out["per_channel"] = global_mean_std(mine["images"], dim=(0, 2, 3))
    images = torch.from_numpy(mine["images"])
    out["per_channel_negative_dims"] = tuple(v.numpy() for v in global_mean_std(images, dim=(-1, 0, -2)))
    out["wide"] = global_mean_std(mine["wide"])
    out["no_data_anywhere"] = global_mean_std(np.zeros((0, 2)))
    if world_size > 1:  # ranks that disagree on the per-sample shape: a clear error everywhere
        try:  # last collective of the run, so any outcome is recorded without hiding the rest
            out["mismatch"] = repr(global_mean_std(np.ones((2, 3 if rank == 0 else 2))))
        except Exception as exc:  # noqa: BLE001 - the test checks the type
            out["mismatch"] = f"{type(exc).__name__}: {exc}"
    return out


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda w: f"world{w}")
def run(request):
    world_size = request.param
    data = make_data(world_size)
    return world_size, data, run_ranks(stats_worker, world_size, args=(data,), timeout=90)


def concat(parts):
    return np.concatenate(parts)


def test_rows_are_unequal_and_one_rank_is_empty(run):
    world_size, data, _ = run
    rows = [len(p) for p in data["ordinary"]]
    assert len(set(rows)) == len(rows)
    assert (0 in rows) == (world_size > 1)


def test_mean_and_std_match_numpy(run):
    _, data, results = run
    x = concat(data["ordinary"])
    wide = concat(data["wide"])
    for out in results:
        np.testing.assert_allclose(out["wide"][0], np.mean(wide, axis=0), rtol=1e-12, atol=0)
        np.testing.assert_allclose(out["wide"][1], np.std(wide, axis=0), rtol=1e-6, atol=0)
        mean, std = out["ordinary"]
        np.testing.assert_allclose(mean, np.mean(x, axis=0), rtol=1e-12, atol=0)
        np.testing.assert_allclose(std, np.std(x, axis=0), rtol=1e-6, atol=0)
        mean, std = out["float32"]  # float32 input is reduced in float64
        x32 = concat(data["ordinary"]).astype(np.float32).astype(np.float64)
        np.testing.assert_allclose(mean, np.mean(x32, axis=0), rtol=1e-12, atol=0)
        np.testing.assert_allclose(std, np.std(x32, axis=0), rtol=1e-6, atol=0)


def test_large_offset_data_stays_accurate(run):
    _, data, results = run
    x = concat(data["offset"])
    for out in results:
        mean, std = out["offset"]
        np.testing.assert_allclose(mean, np.mean(x, axis=0), rtol=1e-12, atol=0)
        np.testing.assert_allclose(std, np.std(x, axis=0), rtol=1e-4, atol=0)


def test_sum_of_squares_formula_fails_where_ours_does_not(run):
    _, data, results = run
    parts = data["offset"]
    reference = np.std(concat(parts), axis=0)
    # The seed's formula: all-reduce count, sum and sum of squares, then sqrt(E[x^2] - E[x]^2).
    n = sum(len(p) for p in parts)
    total = sum(p.sum(axis=0) for p in parts)
    total_sq = sum((p * p).sum(axis=0) for p in parts)
    variance = total_sq / n - (total / n) ** 2
    # Both terms are ~1e16, where float64 steps by 2: the difference is 0, +-2, +-4, ... for
    # a true variance of ~1e-6, so each feature's std is 0 (100% off), NaN or ~1000x too big.
    seed_std = np.sqrt(np.abs(variance))  # abs: a negative "variance" counts as wrong, not NaN
    seed_error = np.abs(seed_std - reference) / reference
    assert np.all(seed_error >= 1.0) and seed_error.max() > 1.0, f"seed formula error {seed_error}"
    ours = results[0]["offset"][1]
    assert np.all(np.abs(ours - reference) / reference < 1e-4)


def test_unbiased_matches_ddof_1(run):
    _, data, results = run
    for name in ("ordinary", "offset"):
        x = concat(data[name])
        for out in results:
            mean, std = out[name + "_unbiased"]
            np.testing.assert_allclose(mean, np.mean(x, axis=0), rtol=1e-12, atol=0)
            np.testing.assert_allclose(std, np.std(x, axis=0, ddof=1), rtol=1e-4 if name == "offset" else 1e-6)
            assert not np.allclose(std, np.std(x, axis=0), rtol=1e-3), "ddof=1 must differ from ddof=0 here"


def test_torch_in_torch_out_numpy_in_numpy_out(run):
    _, _, results = run
    for out in results:
        assert out["torch_types"] == ("Tensor", "Tensor", torch.float64, torch.float64)
        assert out["numpy_types"] == ("ndarray", "ndarray")
        for a, b in zip(out["torch"], out["ordinary"]):
            np.testing.assert_array_equal(a, b)


def test_tuple_dim_gives_per_channel_stats(run):
    _, data, results = run
    x = concat(data["images"])
    for out in results:
        for key in ("per_channel", "per_channel_negative_dims"):
            mean, std = out[key]
            assert mean.shape == std.shape == (2,)
            np.testing.assert_allclose(mean, np.mean(x, axis=(0, 2, 3)), rtol=1e-12, atol=0)
            np.testing.assert_allclose(std, np.std(x, axis=(0, 2, 3)), rtol=1e-6, atol=0)


def test_every_rank_gets_bit_identical_results(run):
    _, _, results = run
    keys = [
        "ordinary",
        "ordinary_unbiased",
        "offset",
        "offset_unbiased",
        "torch",
        "float32",
        "per_channel",
        "per_channel_negative_dims",
        "wide",
    ]
    for out in results[1:]:
        for key in keys:
            for a, b in zip(out[key], results[0][key]):
                assert a.tobytes() == b.tobytes(), f"{key} differs between ranks"


def test_no_samples_anywhere_is_nan_like_numpy(run):
    _, _, results = run
    for out in results:
        mean, std = out["no_data_anywhere"]
        assert mean.shape == std.shape == (2,)
        assert np.isnan(mean).all() and np.isnan(std).all()


def test_different_per_sample_shapes_raise_on_every_rank(run):
    world_size, _, results = run
    if world_size == 1:
        pytest.skip("needs two ranks to disagree")
    for rank, out in enumerate(results):
        message = out["mismatch"]
        assert message.startswith("ValueError: "), f"rank {rank} got {message}"
        assert f"rank {rank}" in message and "different shapes" in message
        assert f"({3 if rank == 0 else 2},)" in message


# --- one process, no process group (world size 1) -----------------------------------


def test_without_process_group_is_numpy():
    x = np.random.default_rng(0).normal(size=(6, 4))
    mean, std = global_mean_std(x)
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(std, x.std(axis=0), rtol=1e-12)
    mean, std = global_mean_std(x[:, 0])  # 1-D: scalar results
    assert mean.shape == () and np.isclose(mean, x[:, 0].mean())
    mean, std = global_mean_std(x[:1], unbiased=True)  # n - 1 == 0: NaN, as numpy
    assert np.isnan(std).all()
    mean, std = global_mean_std(np.zeros((5, 0)))  # no features: empty, not an error
    assert mean.shape == std.shape == (0,)


@pytest.mark.parametrize(
    "value,kwargs,words",
    [
        ([1.0, 2.0], {}, ["torch.Tensor or numpy.ndarray", "list"]),
        (np.zeros((3, 2)), {"dim": 2}, ["dim=2", "(3, 2)"]),
        (np.zeros((3, 2)), {"dim": ()}, ["dim=()"]),
        (np.array(1.0), {}, ["0-d"]),
    ],
)
def test_bad_input_names_the_problem(value, kwargs, words):
    with pytest.raises(ValueError) as info:
        global_mean_std(value, **kwargs)
    for word in words:
        assert word in str(info.value)
