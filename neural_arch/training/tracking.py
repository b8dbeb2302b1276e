"""Experiment tracking that follows a job through stops, restarts, requeues and resizes: one tracking
run per training run, in MLflow (here) and Weights & Biases (wandb_tracking.py), either or both.

Used by trainer.py on rank 0: ``trackers = open_trackers(cfg, run_dir, components, rank)``; every
``Tracker`` then gets ``log_row(step, row)`` per metrics row and ``finish(run_dir)`` (the run's
outputs as files, run ended) or ``pause()`` (stopped by a signal, to be resumed). Each one's run
id is kept in the checkpoint (``components.tracking_ids``) and in a file in the run directory.
MLflow alone::

    tracker = MlflowTracker.open(cfg, run_dir, saved_id, params)   # saved_id: the resumed checkpoint's, or None

The store is ``logging.mlflow_uri`` or, by default, a SQLite file in the run directory
(``sqlite:///RUN_DIR/mlflow.db``: no server). The MLflow run id is kept in the checkpoint and in
``RUN_DIR/mlflow_run_id``, so a resumed, restarted or resized job reopens the same run; steps it
trains again after a restart (from the last checkpoint on) are not logged twice: a row is logged
only past the last step the run already holds. The resolved config is logged as params once.
Optional: ``pip install 'neural_arch[mlflow]'``.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any, Optional, Protocol

from neural_arch.training.config import config_to_dict
from neural_arch.training.typed_config import ConfigError
from neural_arch.utils.atomic import commit_file

RUN_ID_FILE = "mlflow_run_id"
ARTIFACTS = ("report.md", "loss.png", "summary.txt", "summary.json", "config.yaml")
SERVICES = {"mlflow": ("mlflow", "MLflow"), "wandb": ("wandb", "Weights & Biases")}
"""``logging.KEY``: (the package's module, its name), for each tracking service."""


class Tracker(Protocol):
    """One tracking service's run for this training run (rank 0)."""

    run_id: str

    def log_row(self, step: int, row: dict[str, float]) -> None: ...

    def finish(self, run_dir: Path) -> None: ...

    def pause(self) -> None: ...


class MlflowTracker:
    """Rank 0's MLflow run for this training run."""

    def __init__(self, mlflow: Any, run_id: str, logged_up_to: int) -> None:
        self.mlflow, self.run_id, self.logged_up_to = mlflow, run_id, logged_up_to

    @classmethod
    def open(cls, cfg: Any, run_dir: Path, saved_id: Optional[str], params: dict[str, Any]) -> MlflowTracker:
        """Reopen the run ``saved_id`` (or the run directory's) or start one; ``params``: the flattened config."""
        try:
            import mlflow
        except ImportError:
            raise missing_package("mlflow") from None
        logging.getLogger("alembic").setLevel(logging.WARNING)  # its table set-up chatter, once per new store
        mlflow.set_tracking_uri(cfg.logging.mlflow_uri or f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
        mlflow.set_experiment(cfg.run.name)
        known = saved_id or read_run_id(run_dir, RUN_ID_FILE)
        if known is not None and cfg.checkpoint.resume != "none":
            mlflow.start_run(run_id=known)
            history = mlflow.tracking.MlflowClient().get_metric_history(known, "train/loss")
            return cls(mlflow, known, max((m.step for m in history), default=0))
        run = mlflow.start_run(run_name=cfg.run.name)
        mlflow.log_params({k: str(v)[:6000] for k, v in params.items()})
        commit_file(run_dir / RUN_ID_FILE, lambda f: f.write(run.info.run_id.encode()))
        return cls(mlflow, run.info.run_id, 0)

    def log_row(self, step: int, row: dict[str, float]) -> None:
        """Log a metrics row, unless the run already holds this step (trained again after a restart)."""
        if step > self.logged_up_to:
            self.mlflow.log_metrics({k: float(v) for k, v in row.items()}, step=step)
            self.logged_up_to = step

    def finish(self, run_dir: Path) -> None:
        """The run's outputs as artifacts; the MLflow run ends as finished."""
        for name in ARTIFACTS:
            if (run_dir / name).exists():
                self.mlflow.log_artifact(str(run_dir / name))
        self.mlflow.end_run(status="FINISHED")

    def pause(self) -> None:
        """A stopped run (signal, preemption): left open to be reopened by the resumed job."""
        self.mlflow.end_run(status="KILLED")


def open_trackers(cfg: Any, run_dir: Path, components: Any, rank: int) -> list[Tracker]:
    """Rank 0: a tracker for each of ``logging.mlflow`` and ``logging.wandb`` that is on, each reopening the
    run named in ``components.tracking_ids`` (from the resumed checkpoint), which then holds their run ids."""
    if rank != 0:
        return []
    trackers: list[Tracker] = []
    ids = components.tracking_ids
    if cfg.logging.mlflow:
        trackers.append(MlflowTracker.open(cfg, run_dir, ids.get("mlflow"), flat_params(config_to_dict(cfg))))
        ids["mlflow"] = trackers[-1].run_id
    if cfg.logging.wandb:
        from neural_arch.training.wandb_tracking import WandbTracker  # imports this module: only when asked

        trackers.append(WandbTracker.open(cfg, run_dir, ids.get("wandb"), config_to_dict(cfg), components.step))
        ids["wandb"] = trackers[-1].run_id
    return trackers


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


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 0.1}}`` -> ``{"optim.lr": 0.1}``."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat_params(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def read_run_id(run_dir: Path, name: str) -> Optional[str]:
    """The run id a tracker kept in ``run_dir/name``; None if there is none."""
    try:
        return (run_dir / name).read_text().strip() or None
    except OSError:
        return None
