"""Checks of a sea-ice store before anything trains on it; each problem is one line naming
the store, the variable and what to do.

Run: ``python -c "from neural_arch.apps.icenet.data import check_store; check_store('data/icenet.zarr')"``
(``neural-arch train`` runs it through ``IceNetTask.data_missing`` before it writes anything).

``check_layout`` looks at metadata only (variables, dims, dtypes, the time axis) and runs
whenever a store is opened. ``check_values`` reads every month once, in blocks of about
64 MiB, and refuses NaN/inf anywhere in the inputs, concentrations outside [0, 1] and a land
mask that is not 0/1: a user's store with gaps over land or SIC in percent would otherwise
train on garbage, or fail on one rank in the middle of a collective.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

FIELDS = ("siconca", "tas_anom", "tos_anom")
"""The monthly input variables, each (time, yc, xc) and floating point."""
FIX_HINT = "fix the store, or create one with `neural-arch create-data --config icenet`"
_BLOCK_BYTES = 64 * 2**20


def check_layout(ds: xr.Dataset, path: Path) -> None:
    """Variables, dims and dtypes of the store at ``path``, and a monthly time axis; ValueError if not."""
    expected = {**{name: ("time", "yc", "xc") for name in FIELDS}, "land_mask": ("yc", "xc")}
    for name, dims in expected.items():
        if name not in ds.variables:
            raise ValueError(
                f"IceNet data at {path} has no variable {name!r} (found {sorted(ds.data_vars)}); {FIX_HINT}"
            )
        if ds[name].dims != dims:
            raise ValueError(f"IceNet data at {path}: {name} has dims {ds[name].dims}, expected {dims}; {FIX_HINT}")
    for name in FIELDS:
        if not np.issubdtype(ds[name].dtype, np.floating):
            raise ValueError(
                f"IceNet data at {path}: {name} has dtype {ds[name].dtype}, expected a float type "
                f"(float32 or float64); {FIX_HINT}"
            )
    if not (np.issubdtype(ds["land_mask"].dtype, np.number) or ds["land_mask"].dtype == bool):
        raise ValueError(
            f"IceNet data at {path}: land_mask has dtype {ds['land_mask'].dtype}, expected 0/1 numbers "
            f"(uint8, bool or float); {FIX_HINT}"
        )
    if "time" not in ds.coords or not np.issubdtype(ds["time"].dtype, np.datetime64):
        raise ValueError(f"IceNet data at {path} has no datetime 'time' coordinate; {FIX_HINT}")
    months = ds["time"].values.astype("datetime64[M]").astype(np.int64)
    gaps = np.flatnonzero(np.diff(months) != 1)
    if gaps.size:
        t = int(gaps[0])
        raise ValueError(
            f"IceNet data at {path}: time is not consecutive months ({_month(ds, t)} is followed by "
            f"{_month(ds, t + 1)}); one entry per calendar month is expected; {FIX_HINT}"
        )


def check_values(ds: xr.Dataset, path: Path) -> None:
    """Every value of the inputs finite, SIC within [0, 1], the land mask 0/1; ValueError if not."""
    land = np.asarray(ds["land_mask"].values)
    if not np.isin(land, (0, 1)).all():
        odd = np.unique(land[~np.isin(land, (0, 1))])[:3].tolist()
        raise ValueError(
            f"IceNet data at {path}: land_mask holds {odd}, expected only 0 (ocean) and 1 (land); {FIX_HINT}"
        )
    for name in FIELDS:
        _check_field(ds, path, name)
    if "siconca_climatology" in ds.variables and not np.isfinite(ds["siconca_climatology"].values).all():
        raise ValueError(
            f"IceNet data at {path}: siconca_climatology has NaN/inf values; delete that variable "
            f"(it is then computed from the train years) or {FIX_HINT}"
        )


def _check_field(ds: xr.Dataset, path: Path, name: str) -> None:
    variable = ds[name].variable
    months = variable.shape[0]
    block = max(1, _BLOCK_BYTES // max(1, variable[0].size * variable.dtype.itemsize))
    bad, first, low, high = 0, None, np.inf, -np.inf
    for start in range(0, months, block):
        values = np.asarray(variable[start : start + block].values)
        finite = np.isfinite(values)
        if not finite.all():
            per_month = (~finite).reshape(len(values), -1).sum(axis=1)
            first = start + int(np.flatnonzero(per_month)[0]) if first is None else first
            bad += int(per_month.sum())
        if name == "siconca" and finite.any():
            low, high = min(low, float(values[finite].min())), max(high, float(values[finite].max()))
    if first is not None:
        raise ValueError(
            f"IceNet data at {path}: input {name} has {bad} NaN/inf values, the first in month "
            f"{_month(ds, first)}; every input value must be finite: fill the gaps (e.g. with 0 over "
            f"land) or {FIX_HINT}"
        )
    if low < 0 or high > 1:
        percent = " (percent? divide by 100)" if high > 1 and high <= 100 else ""
        raise ValueError(
            f"IceNet data at {path}: siconca ranges from {low:g} to {high:g}, expected sea-ice "
            f"concentration as a fraction in [0, 1]{percent}; {FIX_HINT}"
        )


def _month(ds: xr.Dataset, t: int) -> str:
    return f"{ds['time'].values[t].astype('datetime64[M]')} (time index {t})"
