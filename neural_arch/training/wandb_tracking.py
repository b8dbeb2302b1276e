"""Weights & Biases tracking that follows a job through stops, restarts, requeues and resizes: one W&B run per
training run.

Used by tracking.py's ``open_trackers`` on rank 0 when ``logging.wandb`` is true::

    tracker = WandbTracker.open(cfg, run_dir, saved_id, config, step)  # saved_id, step: the resumed checkpoint's
    tracker.log_row(step, row)                                         # every metrics row, at its step
    tracker.finish(run_dir)                                            # the outputs as run files, run finished

The resolved config is the run's config; W&B's files go to ``RUN_DIR/wandb/``. Online or offline is
W&B's choice (``WANDB_MODE``, ``wandb offline``, online once ``wandb login`` is done) unless
``logging.wandb_mode`` says; an offline run is uploaded later with ``wandb sync RUN_DIR/wandb/offline-run-*``
(W&B syncs the pieces of one run in the order they started). The W&B run id is kept in the checkpoint
and in ``RUN_DIR/wandb_run_id``, so a resumed, restarted or resized job continues the same run
(``resume="allow"``), logging each step once: W&B says which rows it holds (online: where the run's
history ends; offline: its files, wandb_files.py), rows up to the checkpoint resumed from that it lost
(a killed process's last seconds of rows) are logged again from ``metrics.jsonl``, and rows past it,
trained again now, only past what it holds. Optional: ``pip install 'neural_arch[wandb]'``.
"""

from __future__ import annotations

import json
import secrets
import string
from pathlib import Path
from typing import Any, Optional

from neural_arch.training.tracking_common import ARTIFACTS, missing_package, read_run_id
from neural_arch.training.wandb_files import last_offline_step
from neural_arch.utils.atomic import commit_file

RUN_ID_FILE = "wandb_run_id"


class WandbTracker:
    """Rank 0's W&B run for this training run."""

    def __init__(self, run: Any, logged_up_to: int) -> None:
        self.run, self.run_id, self.logged_up_to = run, run.id, logged_up_to

    @classmethod
    def open(cls, cfg: Any, run_dir: Path, saved_id: Optional[str], config: dict[str, Any], step: int) -> WandbTracker:
        """Continue the run ``saved_id`` (or the run directory's) or start one; ``config``: the resolved
        config; ``step``: the step training starts from (a resumed checkpoint's, else 0)."""
        try:
            import wandb
        except ImportError:
            raise missing_package("wandb") from None
        known = saved_id or read_run_id(run_dir, RUN_ID_FILE)
        continuing = known is not None and cfg.checkpoint.resume != "none"
        run_id = known if continuing else new_run_id()
        if not continuing:  # before the run starts: a job stopped in between continues it, not another
            commit_file(run_dir / RUN_ID_FILE, lambda f: f.write(run_id.encode()))
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
        # An online run that continues starts after the last step the server holds; an offline one at 0.
        held = last_offline_step(run_dir / "wandb", run_id) if run.offline else run.starting_step - 1
        tracker = cls(run, max(held, 0))
        for row_step, row in saved_rows(run_dir / "metrics.jsonl", tracker.logged_up_to, step):
            tracker.log_row(row_step, row)
        return tracker

    def log_row(self, step: int, row: dict[str, float]) -> None:
        """Log a metrics row at its step, unless the run holds this step already (trained again after a restart)."""
        if step > self.logged_up_to:
            self.run.log({k: float(v) for k, v in row.items()}, step=step, commit=True)  # sent now, not with the next
            self.logged_up_to = step

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


def new_run_id() -> str:
    """A fresh run id like W&B's own: 8 lowercase letters and digits."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def saved_rows(metrics: Path, after: int, up_to: int) -> list[tuple[int, dict[str, float]]]:
    """The rows ``metrics.jsonl`` holds for steps in (``after``, ``up_to``], in step order; a step's rows
    from several attempts (trained again after a restart) or lines (the final validation) as one."""
    rows: dict[int, dict[str, float]] = {}
    if up_to > after and metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                row = json.loads(line)
                step = int(row.pop("step"))
            except (ValueError, KeyError, TypeError, AttributeError):  # a line cut short by a kill
                continue
            if after < step <= up_to:
                rows.setdefault(step, {}).update(row)
    return sorted(rows.items())
