"""A user's sea-ice store with a missing variable, wrong dims or dtypes, NaNs or values out of
range: one line naming the store, the variable and the problem; ``neural-arch train`` exits 2
and writes nothing.

Run: ``.venv/bin/python -m pytest tests/apps/icenet/test_store_checks.py -q``
One small valid store (16x16 grid, 6 years) per module; each case rewrites a copy of it.
"""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from neural_arch.apps.icenet.data import IceNetSpec, check_store, create_dataset
from neural_arch.apps.icenet.task import normalization_path
from tests.helpers.cli import cli

pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata")  # zarr 3 about the copies written here
SPEC = IceNetSpec(grid=16, years=6, val_years=1, seed=0)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("icenet") / "good.zarr"
    create_dataset(path, SPEC)
    return path


def rewritten(store: Path, path: Path, change) -> Path:
    with xr.open_dataset(store, engine="zarr", chunks=None) as ds:
        broken = change(ds.load())
    broken.to_zarr(path, mode="w", consolidated=True)
    return path


def with_nan(store: Path, path: Path, name: str, month: int) -> Path:
    shutil.copytree(store, path)
    field = np.asarray(zarr.open_group(path, mode="r")[name][month])
    field[5, 6] = np.nan
    zarr.open_group(path, mode="r+")[name][month] = field
    return path


def test_a_good_store_passes(store):
    assert check_store(store) == SPEC


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda ds: ds.drop_vars("tas_anom"), ["has no variable 'tas_anom'"]),
        (
            lambda ds: ds.assign(siconca=ds.siconca.transpose("time", "xc", "yc")),
            ["siconca has dims ('time', 'xc', 'yc'), expected ('time', 'yc', 'xc')"],
        ),
        (
            lambda ds: ds.assign(tos_anom=(ds.tos_anom * 10).astype(np.int32)),
            ["tos_anom has dtype int32, expected a float"],
        ),
        (lambda ds: ds.assign(land_mask=ds.land_mask.astype(str)), ["land_mask has dtype <U", "0/1 numbers"]),
        (lambda ds: ds.assign(land_mask=ds.land_mask * 2), ["land_mask holds [2]", "only 0 (ocean) and 1 (land)"]),
        (
            lambda ds: ds.assign(siconca=ds.siconca * 100),
            ["siconca ranges from 0 to 100", "[0, 1] (percent? divide by 100)"],
        ),
        (
            lambda ds: ds.isel(time=[t for t in range(72) if t != 30]),
            ["time is not consecutive months (1997-06 (time index 29) is followed by 1997-08 (time index 30))"],
        ),
    ],
    ids=["missing-variable", "wrong-dims", "int-dtype", "text-land-mask", "land-mask-values", "percent", "gap-in-time"],
)
@pytest.mark.filterwarnings("ignore")  # xarray/zarr: int32 from float, a unicode dtype without a zarr v3 spec
def test_bad_store_is_one_line_naming_store_and_variable(store, tmp_path, change, words):
    path = rewritten(store, tmp_path / "bad.zarr", change)
    with pytest.raises(ValueError) as info:
        check_store(path)
    message = str(info.value)
    assert message.startswith(f"IceNet data at {path}") and "\n" not in message, message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    "name, month, label", [("siconca", 3, "1995-04 (time index 3)"), ("tos_anom", 70, "2000-11 (time index 70)")]
)
def test_nan_anywhere_in_an_input_is_found(store, tmp_path, name, month, label):
    """Month 70 is in the validation years: a per-sample reader would meet it only at the end."""
    path = with_nan(store, tmp_path / "nan.zarr", name, month)
    with pytest.raises(
        ValueError, match=rf"input {name} has 1 NaN/inf values, the first in month {re.escape(label)}.* finite"
    ):
        check_store(path)


@pytest.mark.multiprocess  # runs the CLI
@pytest.mark.parametrize("defect", ["nan", "missing-variable"])
def test_train_exits_2_and_writes_nothing(store, tmp_path, defect):
    if defect == "nan":
        path, words = with_nan(store, tmp_path / "user.zarr", "tas_anom", 40), ["input tas_anom", "NaN/inf"]
    else:
        path, words = rewritten(store, tmp_path / "user.zarr", lambda ds: ds.drop_vars("tos_anom")), ["'tos_anom'"]
    run = tmp_path / "run"
    sets = [
        "run.task=icenet",
        "data.grid=16",
        "data.years=6",
        "data.val_years=1",
        "model.widths=[4,8]",
        f"data.path={path}",
        f"run.dir={run}",
        "training.global_batch_size=6",
        "training.steps=2",
    ]
    proc = cli("train", *[a for s in sets for a in ("--set", s)], "--nproc-per-node", "2")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    for word in [f"data.path='{path}'", str(path), *words]:
        assert word in lines[0], lines[0]
    assert not run.exists() and not normalization_path(path).exists()
