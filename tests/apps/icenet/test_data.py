"""The synthetic IceNet dataset: byte-identical parallel creation, lazy per-rank reads, content.

Run: ``.venv/bin/python -m pytest tests/test_icenet_data.py -q``

A small store (grid 16, 6 years) is created by one process; a second one by 3 real ranks
(init_store on rank 0, barrier, write_months everywhere) must equal it byte for byte. The
reading tests hand-check ``IceNetData`` against the store decoded by xarray/numpy; broken
stores are copies with one thing damaged. The content statistics (seasons, trend,
persistence, temperatures leading the ice) use a 25-year store, read with numpy.
"""

import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
import zarr

from neural_arch.apps.icenet.data import IceNetData, IceNetSpec, create_dataset, init_store, write_months
from neural_arch.distributed import DistributedSampler, barrier, init_process_group
from tests.helpers.multiproc import run_ranks

SPEC = IceNetSpec(grid=16, years=6, val_years=1)
T = SPEC.months


def create_worker(rank, world_size, path, spec):
    init_process_group(backend="gloo", timeout=30)
    if rank == 0:
        init_store(path, spec)
    barrier()  # nobody writes into a store that does not exist yet
    write_months(path, spec, rank, world_size)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return create_dataset(tmp_path_factory.mktemp("one") / "icenet.zarr", SPEC)


@pytest.fixture(scope="module")
def raw(store):
    """The store decoded by xarray: {name: numpy array}, independent of IceNetData."""
    with xr.open_dataset(store, engine="zarr", chunks=None) as ds:
        out = {name: ds[name].values for name in ds.variables}
        units = {n: ds[n].attrs.get("units") for n in ("siconca", "tas_anom", "tos_anom", "xc", "yc")}
        return out | {"attrs": dict(ds.attrs), "units": units}


def files(root):
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            p = Path(folder) / name
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


# --- creation ---------------------------------------------------------------------------


@pytest.mark.multiprocess
def test_three_ranks_write_the_same_bytes_as_one(store, tmp_path):
    path = tmp_path / "three.zarr"
    run_ranks(create_worker, 3, args=(path, SPEC), timeout=120)
    one, three = files(store), files(path)
    chunks = [k for k in three if k.startswith("siconca/c/")]
    assert len(chunks) == T, "one chunk file per month"
    assert sorted(one) == sorted(three)
    differ = [k for k in one if one[k] != three[k]]
    assert not differ, f"files differ: {differ[:5]}"
    with (
        xr.open_dataset(store, engine="zarr", chunks=None) as a,
        xr.open_dataset(path, engine="zarr", chunks=None) as b,
    ):
        for name in a.variables:
            assert a[name].values.tobytes() == b[name].values.tobytes(), name
        assert a.attrs == b.attrs


def test_serial_two_rank_writes_also_match(store, tmp_path):
    path = tmp_path / "two.zarr"
    init_store(path, SPEC)
    for rank in (1, 0):  # order does not matter either
        write_months(path, SPEC, rank, 2)
    assert files(path) == files(store)


def test_other_seed_gives_other_bytes(store, tmp_path):
    other = files(create_dataset(tmp_path / "seed1.zarr", replace(SPEC, seed=1)))
    mine = files(store)
    assert other["siconca/c/5/0/0"] != mine["siconca/c/5/0/0"]


def test_store_metadata(raw):
    attrs = raw["attrs"]
    assert attrs["source"] == "neural_arch synthetic IceNet-style data" and attrs["title"]
    assert {k: attrs[k] for k in ("grid", "years", "lags", "leads", "val_years", "seed")} == dict(
        grid=16, years=6, lags=3, leads=3, val_years=1, seed=0
    )
    assert raw["siconca"].dtype == raw["tas_anom"].dtype == raw["tos_anom"].dtype == np.float32
    assert raw["siconca"].shape == (T, 16, 16)
    assert raw["time"][0] == np.datetime64("1995-01-01") and raw["time"][-1] == np.datetime64("2000-12-01")
    assert raw["xc"].dtype == np.float32 and raw["xc"][1] - raw["xc"][0] == 50.0
    assert raw["units"] == {"siconca": "1", "tas_anom": "K", "tos_anom": "K", "xc": "km", "yc": "km"}
    assert raw["land_mask"].dtype == np.uint8 and set(np.unique(raw["land_mask"])) == {0, 1}


# --- content: 25 years (numpy on the decoded store) ---------------------------------------

LONG = IceNetSpec(grid=16, years=25, val_years=5)  # enough years for trend and persistence statistics


@pytest.fixture(scope="module")
def long_store(tmp_path_factory):
    return create_dataset(tmp_path_factory.mktemp("long") / "icenet.zarr", LONG)


@pytest.fixture(scope="module")
def long_raw(long_store):
    with xr.open_dataset(long_store, engine="zarr", chunks=None) as ds:
        return {name: ds[name].values for name in ("siconca", "tas_anom", "tos_anom", "land_mask")}


def anomalies(raw):
    """SIC minus its calendar-month mean, on cells whose SIC varies between years."""
    sic = raw["siconca"].astype(np.float64)
    clim = np.stack([sic[m::12].mean(axis=0) for m in range(12)])
    anom = sic - clim[np.arange(len(sic)) % 12]
    varies = anom.std(axis=0) > 0.05
    assert varies.sum() > 20, "too few cells with interannual variability to test"
    return anom[:, varies], varies


def ice_area(raw):
    """km^2 of ice per [year, month]."""
    return (raw["siconca"].astype(np.float64) * LONG.cell_km**2).sum(axis=(1, 2)).reshape(-1, 12)


def test_concentration_range_and_land(long_raw):
    sic, land = long_raw["siconca"], long_raw["land_mask"].astype(bool)
    assert sic.min() == 0.0 and sic.max() <= 1.0
    assert (sic[:, land] == 0).all()
    assert land[0, 0] and land[-1, -1] and land[0, -1] and land[-1, 0], "land rim at the corners"
    assert 0.05 < land.mean() < 0.4
    assert (sic[:, ~land] >= 0.8).any() and (sic[:, ~land] == 0).any()  # full ice and open water


def test_seasonal_cycle_peaks_in_march(long_raw):
    area = ice_area(long_raw)
    assert (area[:, 2] > 1.5 * area[:, 8]).all(), f"March {area[:, 2]} vs September {area[:, 8]}"
    assert (area.argmax(axis=1) <= 3).all() and ((area.argmin(axis=1) >= 7) & (area.argmin(axis=1) <= 9)).all()


def test_ice_declines_over_the_years(long_raw):
    area = ice_area(long_raw)
    # Without the trend these ratios are 0.94-1.08 (seeds 0-3); with it 1.26-1.46 and ~2.
    assert area[:5].mean() > 1.15 * area[-5:].mean()
    assert area[:5, 8].mean() > 1.5 * area[-5:, 8].mean()  # summer declines faster


def test_anomalies_persist(long_raw):
    x, _ = anomalies(long_raw)
    lag1 = np.corrcoef(x[1:].ravel(), x[:-1].ravel())[0, 1]
    lag3 = np.corrcoef(x[3:].ravel(), x[:-3].ravel())[0, 1]
    assert 0.5 < lag1 < 0.9 and lag3 < lag1 - 0.15, (lag1, lag3)
    area = ice_area(long_raw)
    area = (area - area.mean(axis=0)).ravel()
    t = np.arange(len(area))
    area -= np.polyval(np.polyfit(t, area, 1), t)  # detrended ice-area anomaly
    lag1 = np.corrcoef(area[1:], area[:-1])[0, 1]
    assert 0.7 < lag1 < 0.95, lag1


def test_temperatures_lead_the_ice(long_raw):
    x, varies = anomalies(long_raw)
    for name, lead in (("tas_anom", 1), ("tos_anom", 2)):
        temp = long_raw[name][:, varies].astype(np.float64)
        future = np.corrcoef(temp[:-lead].ravel(), x[lead:].ravel())[0, 1]
        past = np.corrcoef(temp[lead:].ravel(), x[:-lead].ravel())[0, 1]
        assert future < -0.2 and future < past - 0.05, (name, future, past)  # warm now -> less ice later
    # beyond persistence: what SIC now does not explain about next month, air temperature does
    tas = long_raw["tas_anom"][:, varies].astype(np.float64)
    now, nxt = x[:-1].ravel(), x[1:].ravel()
    residual = nxt - np.polyval(np.polyfit(now, nxt, 1), now)
    assert np.corrcoef(tas[:-1].ravel(), residual)[0, 1] < -0.2


def test_month_aware_forecast_beats_persistence(long_store):
    """A linear model of (target-month climatology, SIC anomaly now), fit on train, on val."""
    train, val = IceNetData(long_store, "train"), IceNetData(long_store, "val")
    ocean = train.active_mask

    def features(data, lead):
        batch = data.load(range(len(data)))
        clim_now = torch.from_numpy(data.climatology()[batch["init_month"].numpy() % 12])
        f = torch.stack([batch["climatology_sic"][:, lead], batch["x"][:, 0] - clim_now, torch.ones_like(clim_now)], -1)
        return f[:, ocean].reshape(-1, 3).double(), batch["target_sic"][:, lead][:, ocean].reshape(-1).double(), batch

    for lead in (1, 2):  # months 2 and 3 ahead
        f, y, _ = features(train, lead)
        coef = torch.linalg.lstsq(f, y[:, None]).solution
        f, y, batch = features(val, lead)
        model = ((f @ coef)[:, 0].clamp(0, 1) - y).abs().mean()
        persistence = (batch["persistence_sic"][:, lead][:, ocean].reshape(-1).double() - y).abs().mean()
        assert model < 0.85 * persistence, (lead + 1, float(model), float(persistence))


# --- reading ----------------------------------------------------------------------------


def needed_months(data, ids):
    s = data.spec
    return {int(data.init_months[i]) + d for i in ids for d in range(-s.lags + 1, s.leads + 1)}


def test_each_rank_reads_only_its_share(store):
    size = len(IceNetData(store, "train"))
    shares = []
    for rank in range(3):
        data = IceNetData(store, "train")
        sampler = DistributedSampler(dataset_size=size, num_replicas=3, rank=rank, shuffle=True, seed=3, batch_size=6)
        first = next(iter(sampler))
        shares.append(list(first))
        data.load(first)
        want = needed_months(data, first)
        assert data.reads == len(want), (rank, data.reads, sorted(want))
        assert data.reads <= 2 * 6 < T / 4
        data.load(list(first)[:1])  # already read: no new reads
        assert data.reads == len(want)
    whole = next(
        iter(DistributedSampler(dataset_size=size, num_replicas=1, rank=0, shuffle=True, seed=3, batch_size=6))
    )
    assert sorted(sum(shares, [])) == sorted(whole)  # disjoint shares of one global batch


def test_unneeded_months_are_never_read(store, tmp_path):
    path = shutil.copytree(store, tmp_path / "damaged.zarr")
    for t in range(30, T):  # garbage in every chunk of the later months
        (path / "tas_anom" / "c" / str(t) / "0" / "0").write_bytes(b"not zstd")
    data = IceNetData(path, "train")
    data.load([0, 1, 2])  # init months 2..4 need months 0..7
    assert data.reads == 8
    with pytest.raises(ValueError, match=r"cannot read tas_anom for month 1997-07 \(time index 30\)"):
        data.load([26])  # init month 28 needs months 26..31


def test_load_shapes_dtypes_and_empty(store):
    data = IceNetData(store, "val")
    assert data.channels == [
        "siconca_t0",
        "siconca_t-1",
        "siconca_t-2",
        "tas_anom_t0",
        "tos_anom_t0",
        "month_sin",
        "month_cos",
        "land",
    ]
    batch = data.load([0, 3])
    c, h = len(data.channels), SPEC.grid
    assert batch["x"].shape == (2, c, h, h) and batch["x"].dtype == torch.float32
    for key in ("target_sic", "persistence_sic", "climatology_sic"):
        assert batch[key].shape == (2, 3, h, h) and batch[key].dtype == torch.float32, key
    assert batch["target_class"].shape == (2, 3, h, h) and batch["target_class"].dtype == torch.int64
    assert batch["init_month"].tolist() == [60, 63]
    empty = data.load([])
    assert {k: tuple(v.shape) for k, v in empty.items()} == {
        "x": (0, c, h, h),
        "target_sic": (0, 3, h, h),
        "target_class": (0, 3, h, h),
        "persistence_sic": (0, 3, h, h),
        "climatology_sic": (0, 3, h, h),
        "init_month": (0,),
    }
    assert empty["target_class"].dtype == torch.int64
    assert data.reads == 9  # months 58..66 for init months 60 and 63; none for the empty load
    assert data[1]["x"].shape == (c, h, h)


def test_splits_by_init_year(store):
    train, val = IceNetData(store, "train"), IceNetData(store, "val")
    assert train.init_months.tolist() == list(range(2, 60))  # t - 2 >= 0, Dec 1999 the last
    assert val.init_months.tolist() == list(range(60, 69))  # 2000, while t + 3 < 72
    assert train.land_mask.dtype == torch.bool and train.land_mask.shape == (16, 16)
    assert torch.equal(train.active_mask, ~train.land_mask) and train.cell_area_km2 == 2500.0


def test_hand_checked_sample(store, raw):
    data = IceNetData(store, "train")
    batch = data.load([4])  # init month t = 6: July 1995
    t, sic = 6, raw["siconca"]
    x = batch["x"][0].numpy()
    for lag in range(3):
        np.testing.assert_array_equal(x[lag], sic[t - lag])
    np.testing.assert_array_equal(x[3], raw["tas_anom"][t])
    np.testing.assert_array_equal(x[4], raw["tos_anom"][t])
    angle = 2 * np.pi * 7 / 12  # the first forecast month is August (month 8 -> angle 7/12 turn)
    assert np.allclose(x[5], np.sin(angle)) and np.allclose(x[6], np.cos(angle))
    np.testing.assert_array_equal(x[7], raw["land_mask"])
    np.testing.assert_array_equal(batch["target_sic"][0].numpy(), sic[7:10])
    np.testing.assert_array_equal(batch["persistence_sic"][0].numpy(), np.stack([sic[6]] * 3))
    train_years = sic[:60].astype(np.float64).reshape(5, 12, 16, 16)
    for k, month in enumerate((7, 8, 9)):  # Aug, Sep, Oct over 1995-1999 only
        np.testing.assert_allclose(
            batch["climatology_sic"][0, k].numpy(), train_years[:, month].mean(axis=0), atol=1e-6
        )
    target = sic[7:10]
    classes = np.where(target < 0.15, 0, np.where(target < 0.8, 1, 2))
    np.testing.assert_array_equal(batch["target_class"][0].numpy(), classes)
    assert set(np.unique(classes)) == {0, 1, 2}


def test_class_thresholds_exactly(store, tmp_path):
    path = shutil.copytree(store, tmp_path / "edges.zarr")
    values = np.array([0.0, 0.1499, 0.15, 0.5, 0.7999, 0.8, 1.0], dtype=np.float32)
    field = np.zeros((16, 16), np.float32)
    field[0, : len(values)] = values
    zarr.open_group(path, mode="r+")["siconca"][8] = field
    batch = IceNetData(path, "train").load([5])  # t = 7: first target month 8
    assert batch["target_class"][0, 0, 0, : len(values)].tolist() == [0, 0, 1, 1, 1, 2, 2]


def test_spec_from_attrs_or_given(store, raw):
    data = IceNetData(store, "train", replace(SPEC, lags=1, leads=2, val_years=2))
    assert data.channels == ["siconca_t0", "tas_anom_t0", "tos_anom_t0", "month_sin", "month_cos", "land"]
    assert data.init_months.tolist() == list(range(0, 48))
    clim = data.climatology()  # not the stored one (val_years differs): computed from 4 years
    assert data.reads == 48
    expected = raw["siconca"][:48].astype(np.float64).reshape(4, 12, 16, 16).mean(axis=0)
    np.testing.assert_allclose(clim, expected, atol=1e-6)
    stored = IceNetData(store, "train").climatology()  # val_years matches: the stored one, same bits
    np.testing.assert_array_equal(stored, raw["siconca_climatology"])
    assert not np.allclose(stored, clim)


# --- errors -----------------------------------------------------------------------------


def test_missing_path_says_how_to_create(tmp_path):
    with pytest.raises(ValueError) as info:
        IceNetData(tmp_path / "nope.zarr", "train")
    assert str(info.value) == (
        f"no IceNet data at {tmp_path / 'nope.zarr'}; create it with `neural-arch create-data "
        "--config icenet` (or train with --create-data)"
    )


def rewrite(store, path, change):
    with xr.open_dataset(store, engine="zarr", chunks=None) as ds:
        broken = change(ds.load())
    broken.to_zarr(path, mode="w", consolidated=True)
    return path


@pytest.mark.parametrize(
    "change,words",
    [
        (lambda ds: ds.drop_vars("tos_anom"), ["no variable 'tos_anom'"]),
        (
            lambda ds: ds.assign(siconca=ds.siconca.isel(xc=0)),
            ["siconca has dims ('time', 'yc')", "expected ('time', 'yc', 'xc')"],
        ),
        (
            lambda ds: ds.isel(yc=slice(0, 12), xc=slice(0, 12)),
            ["siconca has shape (72, 12, 12)", "expected (72, 16, 16)"],
        ),
        (lambda ds: ds.drop_attrs(deep=False), ["lacks attributes"]),
    ],
)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_broken_store_names_the_problem(store, tmp_path, change, words):
    path = rewrite(store, tmp_path / "broken.zarr", change)
    with pytest.raises(ValueError) as info:
        IceNetData(path, "train")
    for word in words:
        assert word in str(info.value)
    assert "neural-arch create-data" in str(info.value)


def test_spec_that_does_not_match_the_store(store):
    with pytest.raises(ValueError, match=r"different spec \(grid: store 16 vs spec 20\)"):
        IceNetData(store, "train", replace(SPEC, grid=20))


def test_nan_in_an_input_month_names_variable_and_month(store, tmp_path):
    path = shutil.copytree(store, tmp_path / "nan.zarr")
    field = np.asarray(zarr.open_group(path, mode="r")["tas_anom"][14])
    field[3, 4] = np.nan
    zarr.open_group(path, mode="r+")["tas_anom"][14] = field
    data = IceNetData(path, "train")
    data.load([0])  # months 0..5 only
    with pytest.raises(ValueError, match=r"tas_anom has 1 NaN/inf values in month 1996-03 \(time index 14\)"):
        data.load([12])  # init month 14


def test_unwritten_months_are_reported(tmp_path):
    path = tmp_path / "half.zarr"
    init_store(path, SPEC)
    write_months(path, SPEC, 0, 2)  # rank 1 never wrote: odd months are missing
    with pytest.raises(ValueError, match=r"siconca has 256 NaN/inf values in month 1995-02 \(time index 1\)"):
        IceNetData(path, "train").load([0])


@pytest.mark.parametrize(
    "split,ids,words",
    [
        ("test", [], ["split='test'"]),
        ("train", [58], ["[58] out of range", "58 samples"]),
        ("train", [-1], ["[-1] out of range"]),
        ("train", [1.5], ["integers"]),
    ],
)
def test_bad_split_or_ids(store, split, ids, words):
    with pytest.raises(ValueError) as info:
        IceNetData(store, split).load(ids)
    for word in words:
        assert word in str(info.value)


def test_creation_refuses_to_overwrite_other_data_and_needs_init(tmp_path):
    precious = tmp_path / "results"
    precious.mkdir()
    (precious / "model.pt").write_bytes(b"weights")
    with pytest.raises(ValueError, match="not a zarr store; refusing to overwrite"):
        create_dataset(precious, SPEC)
    assert (precious / "model.pt").read_bytes() == b"weights"
    with pytest.raises(ValueError, match="must call init_store"):
        write_months(tmp_path / "fresh.zarr", SPEC, 1, 2)
