"""The IceNet-style sea-ice forecasting dataset: create it, and read it lazily per sample.

Try it::

    python -c "from neural_arch.apps.icenet.data import IceNetSpec, IceNetData, create_dataset
    create_dataset('/tmp/icenet.zarr', IceNetSpec())
    d = IceNetData('/tmp/icenet.zarr', 'train'); print(len(d), d.channels, d.load([0])['x'].shape)"

The store (zarr through xarray; see ``synth.py`` for how the synthetic months are
made) holds ``siconca`` (1), ``tas_anom`` (K) and ``tos_anom`` (K) on dims (time, yc, xc),
one month per chunk, plus ``land_mask`` (yc, xc) and ``siconca_climatology`` (month, yc, xc).

A sample is a forecast init month t with t-lags+1 >= 0 and t+leads < T. Its input ``x`` has
the channels in ``channels``: SIC at t, t-1, ..., t-lags+1, the air and ocean temperature
anomalies at t, sin/cos of the calendar month of the *first forecast month* t+1 (angle
2*pi*(month-1)/12, so January is angle 0), and the land mask (1 on land). Targets are SIC
at t+1 .. t+leads. Samples whose init month lies in the last ``val_years`` calendar years
form the "val" split, the others "train" (the last train samples' targets may reach into
the val years, as in a forecast issued in December).

``load(ids)`` reads only the months those samples need, once each (a month read is one
chunk of each of the three variables; ``reads`` counts them), so ranks that take strided
shares of the samples read about their share of the store. The climatology baseline is
the train-years mean per calendar month, stored at creation; a reader whose ``val_years``
differs from the store's computes it from the train months instead (and counts those reads).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from dataclasses import asdict, fields
from pathlib import Path
from typing import Literal, Optional, Sequence, Union

import numpy as np
import torch
import xarray as xr

from neural_arch.apps.icenet.store_writer import create_dataset, init_store, write_months
from neural_arch.apps.icenet.synth import IceNetSpec, train_months
from neural_arch.apps.icenet.validate import FIELDS, check_layout, check_values

__all__ = [
    "IceNetSpec",
    "IceNetData",
    "check_store",
    "create_dataset",
    "init_store",
    "write_months",
    "CLASS_THRESHOLDS",
]

CREATE_HINT = "create it with `neural-arch create-data --config icenet` (or train with --create-data)"
CLASS_THRESHOLDS = (0.15, 0.8)  # open water < 0.15 <= marginal ice < 0.8 <= full ice
STORE_FIELDS = ("grid", "cell_km", "years", "start_year", "seed")  # what the stored data depends on


def _open(path: Path) -> xr.Dataset:
    if not (path / "zarr.json").is_file() and not (path / ".zgroup").is_file():
        raise ValueError(f"no IceNet data at {path}; {CREATE_HINT}")
    try:  # chunks=None: lazily indexed arrays, nothing is read until a month is asked for
        return xr.open_dataset(path, engine="zarr", chunks=None)
    except Exception as exc:  # noqa: BLE001 - xarray/zarr raise many types for a damaged store
        raise ValueError(
            f"IceNet data at {path} cannot be opened ({type(exc).__name__}: {exc}); {CREATE_HINT}"
        ) from exc


def check_store(path: Union[str, Path]) -> IceNetSpec:
    """Check the whole store at ``path`` before training on it (layout, then every value: see
    ``validate.py``; reads each month once); its spec, or ValueError in one line."""
    path = Path(path)
    ds = _open(path)
    try:
        check_layout(ds, path)
        spec = _resolve_spec(ds, path, None)
        check_values(ds, path)
    finally:
        ds.close()
    return spec


def _resolve_spec(ds: xr.Dataset, path: Path, spec: Optional[IceNetSpec]) -> IceNetSpec:
    names = [f.name for f in fields(IceNetSpec)]
    stored = {k: ds.attrs[k] for k in names if k in ds.attrs}
    if spec is None:
        missing = [k for k in names if k not in stored]
        if missing:
            raise ValueError(
                f"IceNet data at {path} lacks attributes {missing}; pass spec= or recreate it ({CREATE_HINT})."
            )
        spec = IceNetSpec(**stored)
    differ = {k: (stored[k], getattr(spec, k)) for k in STORE_FIELDS if k in stored and stored[k] != getattr(spec, k)}
    if differ:
        text = ", ".join(f"{k}: store {a!r} vs spec {b!r}" for k, (a, b) in differ.items())
        raise ValueError(f"IceNet data at {path} was made with a different spec ({text}); recreate it ({CREATE_HINT}).")
    shape, want = tuple(ds["siconca"].shape), (spec.months, spec.grid, spec.grid)
    if shape != want:
        raise ValueError(
            f"IceNet data at {path}: siconca has shape {shape} (time, yc, xc), expected {want} "
            f"for grid={spec.grid}, years={spec.years}; {CREATE_HINT}"
        )
    return spec


class IceNetData:
    """One split of the IceNet dataset at ``path``; see the module docstring."""

    def __init__(
        self,
        path: Union[str, Path],
        split: Literal["train", "val"],
        spec: Optional[IceNetSpec] = None,
        *,
        cache_mb: float = 256.0,
    ) -> None:
        if split not in ("train", "val"):
            raise ValueError(f"IceNetData: split={split!r} must be 'train' or 'val'.")
        self.path, self.split = Path(path), split
        self._ds = _open(self.path)
        check_layout(self._ds, self.path)
        self.spec = _resolve_spec(self._ds, self.path, spec)
        self.source = str(self._ds.attrs.get("source", ""))  # synth.SOURCE for made-up months
        s = self.spec
        self.times = self._ds["time"].values.astype("datetime64[M]")
        self._calendar = (self.times.astype(np.int64) % 12).astype(np.int64)  # 0 = January
        first_val = len(self.times) - 12 * s.val_years  # first month of the validation years
        inits = np.arange(s.lags - 1, len(self.times) - s.leads)
        self.init_months = inits[inits < first_val] if split == "train" else inits[inits >= first_val]
        """Time index of each sample's init month t, in sample-id order."""
        self.channels = [f"siconca_t{-lag if lag else 0}" for lag in range(s.lags)] + [
            "tas_anom_t0",
            "tos_anom_t0",
            "month_sin",
            "month_cos",
            "land",
        ]
        self._land = self._ds["land_mask"].values.astype(bool)
        self.land_mask = torch.from_numpy(self._land.copy())
        self.active_mask = ~self.land_mask
        self.cell_area_km2 = float(s.cell_km) ** 2
        self.reads = 0
        """Month slices read from the store by this instance (each = one chunk of every field)."""
        month_bytes = len(FIELDS) * 4 * s.grid * s.grid
        self._cache_months = max(s.lags + s.leads, int(cache_mb * 2**20) // month_bytes)
        self._cache: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._climatology: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.init_months)

    def month_label(self, t: int) -> str:
        """'YYYY-MM (time index t)', as error messages name a month."""
        return f"{self.times[t]} (time index {t})"

    def _read_month(self, t: int) -> dict[str, np.ndarray]:
        if t in self._cache:
            self._cache.move_to_end(t)
            return self._cache[t]
        month = {}
        for name in FIELDS:
            try:  # indexing the lazy variable reads exactly one chunk: month t
                values = np.asarray(self._ds[name].variable[t].values, dtype=np.float32)
            except Exception as exc:  # noqa: BLE001 - report which chunk is damaged
                raise ValueError(
                    f"IceNet data at {self.path}: cannot read {name} for month {self.month_label(t)} "
                    f"({type(exc).__name__}: {exc}); recreate it ({CREATE_HINT})."
                ) from exc
            if not np.isfinite(values).all():
                bad = int((~np.isfinite(values)).sum())
                raise ValueError(
                    f"IceNet data at {self.path}: {name} has {bad} NaN/inf values in month "
                    f"{self.month_label(t)}; the store is incomplete or damaged, recreate it ({CREATE_HINT})."
                )
            month[name] = values
        return self._remember(t, month)

    def _read_months(self, needed: list[int]) -> dict[int, dict[str, np.ndarray]]:
        """Months ``needed``, each read once; those not cached are read in one store call per
        field (zarr fetches their chunks together: far less overhead than a call per month when
        a rank starts), the same float32 values as month-by-month reads."""
        have = {t: self._read_month(t) for t in needed if t in self._cache}  # cache hits first: none evicted
        missing = [t for t in needed if t not in have]
        if len(missing) > 1:
            try:
                block = {name: np.asarray(self._ds[name].variable[missing].values, dtype=np.float32) for name in FIELDS}
            except Exception:  # noqa: BLE001 - read month by month below, which names the damaged chunk
                block = {}
            if block and all(np.isfinite(v).all() for v in block.values()):  # else the per-month check names it
                for j, t in enumerate(missing):
                    have[t] = self._remember(t, {name: block[name][j] for name in FIELDS})
        return {t: have[t] if t in have else self._read_month(t) for t in needed}

    def _remember(self, t: int, month: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.reads += 1
        self._cache[t] = month
        while len(self._cache) > self._cache_months:
            self._cache.popitem(last=False)
        return month

    def climatology(self) -> np.ndarray:
        """float32 [12, H, W]: mean SIC per calendar month (0 = January) over the train years."""
        if self._climatology is None:
            stored = self._ds.variables.get("siconca_climatology")
            if (
                stored is not None
                and self._ds.attrs.get("val_years") == self.spec.val_years
                and stored.shape == (12, self.spec.grid, self.spec.grid)
            ):
                self._climatology = np.asarray(stored.values, dtype=np.float32)
            else:  # same summation order as at creation, so the same bits
                total = np.zeros((12, self.spec.grid, self.spec.grid))
                for t in train_months(self.spec, self.spec.val_years):
                    total[self._calendar[t]] += self._read_month(int(t))["siconca"]
                self._climatology = (total / (self.spec.years - self.spec.val_years)).astype(np.float32)
        return self._climatology

    def _check_ids(self, ids: Sequence[int]) -> np.ndarray:
        try:
            out = np.array([operator.index(i) for i in ids], dtype=np.int64)
        except TypeError as exc:
            raise ValueError(f"IceNetData.load: ids must be integers, got {list(ids)[:5]!r}.") from exc
        bad = out[(out < 0) | (out >= len(self))]
        if bad.size:
            raise ValueError(
                f"IceNetData.load: sample ids {bad[:5].tolist()} out of range for the "
                f"{self.split} split of {len(self)} samples."
            )
        return out

    def load(self, ids: Sequence[int]) -> dict[str, torch.Tensor]:
        """Inputs, targets and baselines of samples ``ids`` (shapes in the module docstring)."""
        s, ids = self.spec, self._check_ids(ids)
        n, h, w = len(ids), s.grid, s.grid
        inits = self.init_months[ids]
        needed = sorted({int(t) + d for t in inits for d in range(-s.lags + 1, s.leads + 1)})
        months = self._read_months(needed)
        climatology = self.climatology() if n else np.zeros((12, h, w), np.float32)
        x = np.empty((n, len(self.channels), h, w), np.float32)
        target = np.empty((n, s.leads, h, w), np.float32)
        persistence = np.empty_like(target)
        clim = np.empty_like(target)
        for j, t in enumerate(int(t) for t in inits):
            for lag in range(s.lags):
                x[j, lag] = months[t - lag]["siconca"]
            angle = 2 * np.pi * self._calendar[t + 1] / 12  # calendar month of the first forecast month
            x[j, s.lags :] = np.stack(
                [
                    months[t]["tas_anom"],
                    months[t]["tos_anom"],
                    np.full((h, w), np.sin(angle)),
                    np.full((h, w), np.cos(angle)),
                    self._land.astype(np.float32),
                ]
            )
            for k in range(s.leads):
                target[j, k] = months[t + 1 + k]["siconca"]
                clim[j, k] = climatology[self._calendar[t + 1 + k]]
            persistence[j] = months[t]["siconca"]
        return {
            "x": torch.from_numpy(x),
            "target_sic": torch.from_numpy(target),
            "target_class": torch.from_numpy(np.digitize(target, CLASS_THRESHOLDS).astype(np.int64)),
            "persistence_sic": torch.from_numpy(persistence),
            "climatology_sic": torch.from_numpy(clim),
            "init_month": torch.from_numpy(inits.astype(np.int64)),
        }

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        """One sample, without the leading sample dimension (for ``torch.utils.data``)."""
        return {k: v[0] for k, v in self.load([i]).items()}

    def __repr__(self) -> str:
        return f"IceNetData({str(self.path)!r}, split={self.split!r}, samples={len(self)}, spec={asdict(self.spec)})"
