"""The regression app's config sections: ``model:`` (the MLP) and ``data:`` (synthetic or file).

Used through ``run.task: regression`` (the default; see configs/tiny.yaml), e.g.
``neural-arch train --config tiny --set model.hidden=64 data.num_samples=512``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from neural_arch.training.task import AppSections, RangeRule
from neural_arch.training.typed_config import ConfigError, at_least


@dataclass
class RegressionModelConfig:
    hidden: int = 32
    """Hidden layer width of the MLP."""
    depth: int = 2
    """Number of hidden layers."""


@dataclass
class RegressionDataConfig:
    name: Literal["synthetic", "file"] = "synthetic"
    """Where the samples come from: generated from ``run.seed``, or x/y arrays read from ``path``."""
    path: Optional[str] = None
    """The .pt or .npz file with arrays ``x`` [n, features] and ``y`` [n, targets] (``file``; must exist)."""
    num_samples: int = 256
    """Training samples (synthetic data)."""
    val_samples: int = 64
    """Validation samples: generated ones (synthetic) or the file's last ones; 0 disables validation."""
    features: int = 8
    """Input features per sample (synthetic data)."""
    targets: int = 1
    """Output values per sample (synthetic data)."""
    noise: float = 0.1
    """Standard deviation of the noise added to synthetic targets."""


RANGES: dict[str, RangeRule] = {
    "model.hidden": at_least(1),
    "model.depth": at_least(1),
    "data.num_samples": at_least(1),
    "data.val_samples": at_least(0),
    "data.features": at_least(1),
    "data.targets": at_least(1),
    "data.noise": at_least(0),
}


def validate_data(cfg: Any) -> None:
    """A file source needs an existing path."""
    data = cfg.data
    if data.name == "file" and data.path is None:
        raise ConfigError(
            "data.path=null but data.name is 'file': add 'path: FILE' under 'data:' in the "
            "YAML, or pass --set data.path=FILE (or use data.name=synthetic)"
        )
    if data.name == "file" and not Path(data.path).exists():
        raise ConfigError(
            f"data.path={data.path!r} does not exist (relative paths start at "
            f"{os.getcwd()}); fix the path or create the data file first"
        )


SECTIONS = AppSections(model=RegressionModelConfig, data=RegressionDataConfig, ranges=RANGES, validate=validate_data)
"""What ``run.task: regression`` adds to the config."""
