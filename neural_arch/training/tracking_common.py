"""What the MLflow and W&B trackers share: the outputs they keep as files, the run-id file, the missing-package line.

Used by mlflow_tracking.py, wandb_tracking.py and tracking.py (``require_packages``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Optional

from neural_arch.training.typed_config import ConfigError

ARTIFACTS = ("report.md", "loss.png", "summary.txt", "summary.json", "config.yaml")
"""The run directory's outputs a finished tracking run keeps as files."""
SERVICES = {"mlflow": ("mlflow", "MLflow"), "wandb": ("wandb", "Weights & Biases")}
"""``logging.KEY``: (the package's module, its name), for each tracking service."""


def require_packages(cfg: Any) -> None:
    """Before any process starts: one line when a tracking service is asked for and its package is missing."""
    for key, (module, _) in SERVICES.items():
        if getattr(cfg.logging, key) and importlib.util.find_spec(module) is None:
            raise missing_package(key)


def missing_package(key: str) -> ConfigError:
    """``logging.KEY=true`` without the service's package: what to install (or turn off)."""
    name = SERVICES[key][1]
    return ConfigError(
        f"logging.{key}=true needs {name}: pip install 'neural_arch[{key}]' (or set logging.{key}=false)"
    )


def read_run_id(run_dir: Path, name: str) -> Optional[str]:
    """The run id a tracker kept in ``run_dir/name``; None if there is none."""
    try:
        return (run_dir / name).read_text().strip() or None
    except OSError:
        return None
