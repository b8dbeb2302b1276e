"""A deterministic synthetic regression dataset, and loading the same shape from a file.

Try it::

    >>> from neural_arch.apps.regression.data import make_regression
    >>> make_regression(10)[0].shape
    torch.Size([10, 8])

``make_regression`` draws inputs x ~ N(0, 1) and targets from a fixed random smooth
function plus noise, from one seeded generator: the same bytes on every rank and every
run. ``load_arrays`` reads ``x``/``y`` from a ``.pt`` or ``.npz`` file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
import torch


def make_regression(
    num_samples: int, features: int = 8, targets: int = 1, noise: float = 0.1, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) float64 tensors of shapes [n, features] and [n, targets]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, features, generator=g, dtype=torch.float64)
    w1 = torch.randn(features, 16, generator=g, dtype=torch.float64) / features**0.5
    w2 = torch.randn(16, targets, generator=g, dtype=torch.float64) / 4.0
    y = torch.sin(x @ w1) @ w2 + noise * torch.randn(num_samples, targets, generator=g, dtype=torch.float64)
    return x, y


def load_arrays(path: Union[str, Path]) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) from a ``.pt`` (dict with tensors) or ``.npz`` file holding ``x`` and ``y``."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data file {path} does not exist; create it with x and y arrays (.pt or .npz).")
    if path.suffix == ".npz":
        with np.load(path) as arrays:
            found = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    else:
        found = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(found, dict) or "x" not in found or "y" not in found:
        raise ValueError(f"data file {path} must hold arrays named 'x' and 'y'.")
    x, y = torch.as_tensor(found["x"]).to(torch.float64), torch.as_tensor(found["y"]).to(torch.float64)
    if x.dim() != 2 or y.dim() != 2 or len(x) != len(y):
        raise ValueError(
            f"data file {path}: expected x [n, features] and y [n, targets], got {tuple(x.shape)} and {tuple(y.shape)}."
        )
    if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
        raise ValueError(f"data file {path} contains NaN or infinite values; clean the data first.")
    return x, y


@dataclass(frozen=True)
class Datasets:
    """Train and validation tensors (the full arrays: ranks index them via the sampler)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor


def build_datasets(data: Any, seed: int, dtype: torch.dtype) -> Datasets:
    """Deterministic synthetic data, or x/y from ``data.path``; split train | validation (the
    last ``val_samples``; a file keeps at least one training sample)."""
    if data.name == "file":
        x, y = load_arrays(data.path)
    else:
        x, y = make_regression(data.num_samples + data.val_samples, data.features, data.targets, data.noise, seed=seed)
    n_val = data.val_samples if data.name == "synthetic" else max(0, min(data.val_samples, len(x) - 1))
    x, y = x.to(dtype), y.to(dtype)
    return Datasets(x[: len(x) - n_val], y[: len(y) - n_val], x[len(x) - n_val :], y[len(y) - n_val :])
