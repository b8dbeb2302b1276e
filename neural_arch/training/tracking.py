"""Experiment tracking that follows a job through stops, restarts, requeues and resizes: one tracking
run per training run, in MLflow (mlflow_tracking.py), Weights & Biases (wandb_tracking.py) or both.

Used by trainer.py on rank 0::

    trackers = open_trackers(cfg, run_dir, components, rank)   # one per logging.mlflow / logging.wandb that is on
    tracker.log_row(step, row)                                 # each of them, every metrics row
    tracker.finish(run_dir)                                    # the outputs as files, run ended
    tracker.pause()                                            # or: stopped by a signal, to be resumed

Each tracker's run id is kept in the checkpoint (``components.tracking_ids``) and in a file in the run
directory, so a resumed, restarted, requeued or resized job continues the same runs. The CLI calls
``tracking_common.require_packages(cfg)`` first: a missing package is one line before any process starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from neural_arch.training.config import config_to_dict
from neural_arch.training.mlflow_tracking import MlflowTracker, flat_params
from neural_arch.training.wandb_tracking import WandbTracker


class Tracker(Protocol):
    """One tracking service's run for this training run (rank 0)."""

    run_id: str

    def log_row(self, step: int, row: dict[str, float]) -> None: ...

    def finish(self, run_dir: Path) -> None: ...

    def pause(self) -> None: ...


def open_trackers(cfg: Any, run_dir: Path, components: Any, rank: int) -> list[Tracker]:
    """Rank 0: a tracker for each of ``logging.mlflow`` and ``logging.wandb`` that is on, each reopening the
    run named in ``components.tracking_ids`` (from the resumed checkpoint), which then holds their run ids."""
    if rank != 0:
        return []
    trackers: list[Tracker] = []
    ids, config = components.tracking_ids, config_to_dict(cfg)
    if cfg.logging.mlflow:
        trackers.append(MlflowTracker.open(cfg, run_dir, ids.get("mlflow"), flat_params(config)))
        ids["mlflow"] = trackers[-1].run_id
    if cfg.logging.wandb:
        trackers.append(WandbTracker.open(cfg, run_dir, ids.get("wandb"), config, components.step))
        ids["wandb"] = trackers[-1].run_id
    return trackers
