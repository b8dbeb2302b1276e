"""The sea-ice app's config sections: ``model:`` (the U-Net) and ``data:`` (the gridded store).

Used through ``run.task: icenet`` (configs/icenet.yaml), e.g.
``neural-arch train --config icenet --set data.grid=32 model.widths=[8,16]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from neural_arch.training.task import AppSections, RangeRule
from neural_arch.training.typed_config import ConfigError, at_least


@dataclass
class IceNetModelConfig:
    widths: list[int] = field(default_factory=lambda: [16, 32, 64])
    """U-Net channels per level (its depth is the list's length)."""
    dropout: float = 0.0
    """Dropout probability in the decoder."""


@dataclass
class IceNetDataConfig:
    path: Optional[str] = None
    """The zarr store (made by ``neural-arch create-data --config FILE``)."""
    grid: int = 48
    """Cells per side of the polar grid."""
    years: int = 25
    """Years of monthly data."""
    val_years: int = 5
    """The last years, used for validation."""
    lags: int = 3
    """Past months of ice concentration in the input."""
    leads: int = 3
    """Months ahead to forecast."""


RANGES: dict[str, RangeRule] = {
    "model.widths": ((lambda v: all(w >= 1 for w in v)), "a list of positive channel counts"),
    "model.dropout": ((lambda v: 0 <= v < 1), "in [0, 1)"),
    "data.grid": at_least(8),
    "data.years": at_least(2),
    "data.val_years": at_least(1),
    "data.lags": at_least(1),
    "data.leads": at_least(1),
}


def validate_data(cfg: Any) -> None:
    """The store needs a path, and the validation years must leave training years."""
    data = cfg.data
    if data.path is None:
        raise ConfigError(
            "data.path=null but run.task is 'icenet': set data.path to the zarr store "
            "(created by `neural-arch create-data --config FILE`)"
        )
    if data.val_years >= data.years:
        raise ConfigError(f"data.val_years={data.val_years} must be smaller than data.years={data.years}")


SECTIONS = AppSections(model=IceNetModelConfig, data=IceNetDataConfig, ranges=RANGES, validate=validate_data)
"""What ``run.task: icenet`` adds to the config."""
