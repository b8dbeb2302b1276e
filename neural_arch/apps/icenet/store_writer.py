"""Write the synthetic sea-ice months (synth.py) to a zarr store, from one rank or many.

Try it: ``python -c "from neural_arch.apps.icenet.data import IceNetSpec, create_dataset;
print(create_dataset('/tmp/icenet.zarr', IceNetSpec()))"``.

``init_store`` (rank 0) creates metadata, coordinates, the land mask and the train-years
climatology; ``write_months`` (every rank) fills month i on rank ``i % world_size``; the
caller barriers in between (this module runs no collectives), so the store's bytes do not
depend on how many ranks wrote it.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Union

import numpy as np
import xarray as xr
import zarr

from neural_arch.apps.icenet.synth import (
    SOURCE,
    VARIABLES,
    WRITE_BLOCK,
    IceNetSpec,
    coords_km,
    make_drivers,
    make_land_mask,
    month_starts,
    render_month,
    train_months,
)


def _check_target(path: Path) -> None:
    # mode="w" empties the directory: refuse anything that is not (an old) zarr store.
    if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / "zarr.json").exists())):
        raise ValueError(f"{path} exists and is not a zarr store; refusing to overwrite it. Choose another data path.")


def init_store(path: Union[str, Path], spec: IceNetSpec) -> None:
    """Rank 0: create the store with metadata, coordinates, land mask and climatology."""
    path = Path(path)
    _check_target(path)
    land = make_land_mask(spec)
    drivers = make_drivers(spec)
    # The train-years climatology is what readers compare against; storing it means no reader
    # has to read every training month. Rendering those months here is cheap (ms each).
    total = np.zeros((12, spec.grid, spec.grid))
    for n in train_months(spec, spec.val_years):
        total[n % 12] += render_month(spec, drivers, land, n)["siconca"]
    climatology = (total / (spec.years - spec.val_years)).astype(np.float32)
    ds = xr.Dataset(
        data_vars={
            "land_mask": (
                ("yc", "xc"),
                land.astype(np.uint8),
                {"long_name": "land mask (1 = land, 0 = ocean)", "units": "1"},
            ),
            "siconca_climatology": (
                ("month", "yc", "xc"),
                climatology,
                {
                    "long_name": "mean sea-ice concentration per calendar month over the training years",
                    "units": "1",
                    "years": f"{spec.start_year}-{spec.start_year + spec.years - spec.val_years - 1}",
                },
            ),
        },
        coords={
            "time": ("time", month_starts(spec), {"long_name": "start of month"}),
            "yc": ("yc", coords_km(spec), {"units": "km", "long_name": "y distance from the pole"}),
            "xc": ("xc", coords_km(spec), {"units": "km", "long_name": "x distance from the pole"}),
            "month": ("month", np.arange(1, 13, dtype=np.int32), {"long_name": "calendar month"}),
        },
        attrs={**asdict(spec), "title": "Synthetic IceNet-style monthly sea-ice dataset", "source": SOURCE},
    )
    time_encoding = {"units": f"days since {spec.start_year:04d}-01-01", "calendar": "proleptic_gregorian"}
    encoding = {"time": {**time_encoding, "dtype": "int64"}}
    with warnings.catch_warnings():  # zarr warns that consolidated metadata is not (yet) in the v3 spec
        warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
        ds.to_zarr(path, mode="w", consolidated=True, encoding=encoding)
        group = zarr.open_group(path, mode="r+")
        for name, (units, long_name) in VARIABLES.items():
            # NaN fill: a month no rank wrote reads as NaN, which readers report clearly.
            shape, chunks = (spec.months, spec.grid, spec.grid), (1, spec.grid, spec.grid)
            attributes = {"units": units, "long_name": long_name}
            group.create_array(
                name,
                shape=shape,
                chunks=chunks,
                dtype="float32",
                fill_value=np.nan,
                dimension_names=("time", "yc", "xc"),
                attributes=attributes,
            )
        zarr.consolidate_metadata(path)


def _open_for_writing(path: Path, spec: IceNetSpec) -> zarr.Group:
    hint = "rank 0 must call init_store(path, spec) (and all ranks barrier) before write_months"
    if not (path / "zarr.json").exists():
        raise ValueError(f"no IceNet store at {path}; {hint}.")
    group = zarr.open_group(path, mode="r+")
    found = {k: group.attrs.get(k) for k in asdict(spec)}
    if found != asdict(spec):
        raise ValueError(f"IceNet store at {path} was created with {found}, not {asdict(spec)}; {hint}.")
    return group


def write_months(path: Union[str, Path], spec: IceNetSpec, rank: int, world_size: int) -> None:
    """Every rank: render and write months ``rank, rank + world_size, ...`` (one chunk each)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"write_months: rank={rank} must be in [0, world_size={world_size}).")
    group = _open_for_writing(Path(path), spec)
    land, drivers = make_land_mask(spec), make_drivers(spec)
    mine = range(rank, spec.months, world_size)
    for start in range(0, len(mine), WRITE_BLOCK):
        block = mine[start : start + WRITE_BLOCK]
        fields = [render_month(spec, drivers, land, n) for n in block]
        where = slice(block.start, block.stop, block.step)  # strided: one call writes many chunks concurrently
        for name in VARIABLES:
            group[name][where] = np.stack([f[name] for f in fields])


def create_dataset(path: Union[str, Path], spec: IceNetSpec, *, rank: int = 0, world_size: int = 1) -> Path:
    """Create the whole store (``world_size=1``), or this rank's part of it.

    With ``world_size > 1`` rank 0 creates the store and writes its months; other ranks only
    write theirs, so they must start after rank 0's ``init_store`` finished. Callers with a
    process group use ``init_store`` / ``barrier()`` / ``write_months`` instead.
    """
    path = Path(path)
    if rank == 0:
        init_store(path, spec)
    write_months(path, spec, rank, world_size)
    return path
