"""MLflow tracking that follows a job through stops, restarts, requeues and resizes: one MLflow run per training run.

Used by tracking.py's ``open_trackers`` on rank 0 when ``logging.mlflow`` is true::

    tracker = MlflowTracker.open(cfg, run_dir, saved_id, params)   # saved_id: the resumed checkpoint's, or None
    tracker.log_row(step, row)                                     # every metrics row
    tracker.finish(run_dir)                                        # artifacts (report, plots, summary), run ended

The store is ``logging.mlflow_uri`` or, by default, a SQLite file in the run directory
(``sqlite:///RUN_DIR/mlflow.db``: no server; the artifacts in ``RUN_DIR/mlartifacts``). The MLflow run
id is kept in the checkpoint and in ``RUN_DIR/mlflow_run_id``, so a resumed, restarted or resized job
reopens the same run; steps it trains again after a restart (from the last checkpoint on) are not
logged twice: a row is logged only past the last step the run already holds. The resolved config is
logged as params once. Optional: ``pip install 'neural_arch[mlflow]'``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

from neural_arch.training.tracking_common import ARTIFACTS, missing_package, read_run_id
from neural_arch.utils.atomic import commit_file

RUN_ID_FILE = "mlflow_run_id"


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
        uri = cfg.logging.mlflow_uri
        mlflow.set_tracking_uri(uri or f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
        if uri is None and mlflow.get_experiment_by_name(cfg.run.name) is None:
            # The default store's artifacts beside it: MLflow's default is ./mlruns of the job's working directory.
            mlflow.create_experiment(cfg.run.name, artifact_location=(run_dir / "mlartifacts").resolve().as_uri())
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


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 0.1}}`` -> ``{"optim.lr": 0.1}``."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat_params(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
