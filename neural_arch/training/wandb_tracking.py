"""Weights & Biases tracking that follows a job through stops, restarts, requeues and resizes: one W&B run per
training run.

Used by tracking.py's ``open_trackers`` on rank 0 when ``logging.wandb`` is true::

    tracker = WandbTracker.open(cfg, run_dir, saved_id, config)   # saved_id: the resumed checkpoint's, or None
    tracker.log_row(step, row)                                    # every metrics row, at its step
    tracker.finish(run_dir)                                       # the outputs as run files, run finished

The resolved config is the run's config; W&B's files go to ``RUN_DIR/wandb/``. Online or offline is
W&B's choice (``WANDB_MODE``, ``wandb offline``, online once ``wandb login`` is done) unless
``logging.wandb_mode`` says; an offline run is uploaded later with ``wandb sync RUN_DIR/wandb/offline-run-*``
(W&B syncs the pieces of one run in the order they started). The W&B run id is kept in the checkpoint
and in ``RUN_DIR/wandb_run_id``, so a resumed, restarted or resized job continues the same run
(``resume="allow"``). Steps trained again after a restart (from the last checkpoint on) are not logged
twice: a row is logged only past the last step logged, which ``RUN_DIR/wandb_logged_step`` records after
every row (a checkpoint's copy would be behind: rows after it were logged before the restart). An
online run also knows where its history ends. Optional: ``pip install 'neural_arch[wandb]'``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from neural_arch.training.tracking import ARTIFACTS, missing_package, read_run_id
from neural_arch.utils.atomic import commit_file

RUN_ID_FILE = "wandb_run_id"
LOGGED_STEP_FILE = "wandb_logged_step"


class WandbTracker:
    """Rank 0's W&B run for this training run."""

    def __init__(self, run: Any, run_dir: Path, logged_up_to: int) -> None:
        self.run, self.run_id, self.run_dir, self.logged_up_to = run, run.id, run_dir, logged_up_to

    @classmethod
    def open(cls, cfg: Any, run_dir: Path, saved_id: Optional[str], config: dict[str, Any]) -> WandbTracker:
        """Continue the run ``saved_id`` (or the run directory's) or start one; ``config``: the resolved config."""
        try:
            import wandb
        except ImportError:
            raise missing_package("wandb") from None
        known = saved_id or read_run_id(run_dir, RUN_ID_FILE)
        continuing = known is not None and cfg.checkpoint.resume != "none"
        run_id = known if continuing else wandb.util.generate_id()
        if not continuing:  # before the run starts: a job stopped in between continues it, not another
            commit_file(run_dir / RUN_ID_FILE, lambda f: f.write(run_id.encode()))
            commit_file(run_dir / LOGGED_STEP_FILE, lambda f: f.write(b"0"))
        logging = cfg.logging
        run = wandb.init(
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            project=logging.wandb_project or cfg.run.name,
            entity=logging.wandb_entity,
            mode=logging.wandb_mode,
            name=cfg.run.name,
            config=config,
        )
        # An online run that continues knows its next step; an offline one starts at 0 each time.
        return cls(run, run_dir, max(_logged_step(run_dir), run.starting_step - 1))

    def log_row(self, step: int, row: dict[str, float]) -> None:
        """Log a metrics row at its step, unless the run holds this step already (trained again after a restart)."""
        if step > self.logged_up_to:
            self.run.log({k: float(v) for k, v in row.items()}, step=step, commit=True)  # sent now, not with the next
            self.logged_up_to = step
            commit_file(self.run_dir / LOGGED_STEP_FILE, lambda f: f.write(str(step).encode()))

    def finish(self, run_dir: Path) -> None:
        """The run's outputs (report, plots, summary, config) as run files; the W&B run ends as finished."""
        for name in ARTIFACTS:
            if (run_dir / name).exists():
                self.run.save(str(run_dir / name), base_path=str(run_dir), policy="now", glob=False)
        self.run.finish(exit_code=0)

    def pause(self) -> None:
        """A stopped run (signal, preemption): marked preempting and ended, to be continued by the resumed job."""
        self.run.mark_preempting()
        self.run.finish(exit_code=1)


def _logged_step(run_dir: Path) -> int:
    try:
        return int((run_dir / LOGGED_STEP_FILE).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0
