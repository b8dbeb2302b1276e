"""What Ray Train hears from a neural_arch run: our checkpoints and metrics, and one line when a peer died.

Used by ``integrations/ray.py``: ``RayReport`` is a trainer callback (``neural_arch.training.callbacks``);
``script_reports()`` does the same for a script that saves with ``neural_arch.distributed``'s
``save_checkpoint``/``save_sharded``; ``explained(exc, ...)`` turns a survivor's broken-connection
error into one line saying who failed and who restarts whom.

Checkpoints. Every rank calls ``ray.train.report`` at the same steps (it is a barrier across the
worker group): once per checkpoint committed (after that step's validation, with its metrics),
once after a validation without one, and once at the end if that step was not reported yet.
Rank 0 attaches the committed step directory (``Checkpoint.from_directory``) and the others
``None``: the directory is complete on shared
storage by then (every rank's shards included), so one copy is made, by Ray, into its run
directory as ``<storage_path>/<name>/step_NNNNNNNN``. That copy is Ray's (its ``CheckpointConfig``
prunes it, ``Result.checkpoint`` points to it); our own checkpoints stay in ``run.dir`` and are what
a restarted worker group resumes from. ``report_checkpoints=False`` reports metrics only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import ray.train

from neural_arch.distributed.checkpoint.progress import on_checkpoint_saved
from neural_arch.distributed.launcher.restart_policy import peer_marker
from neural_arch.training.callbacks import Callback, FinishEvent, SaveEvent, StepEvent, ValidationEvent


class PeerLost(RuntimeError):
    """This Ray Train worker failed only because another worker of its group is gone."""


def report(step: int, metrics: Mapping[str, Any], saved: Optional[Path], rank: int, attach: bool) -> None:
    """``ray.train.report`` on every rank: rank 0 attaches ``saved`` (when ``attach``), named like ours."""
    checkpoint = ray.train.Checkpoint.from_directory(str(saved)) if saved and attach and rank == 0 else None
    values = {"step": step, **{k: float(v) for k, v in metrics.items()}}
    if saved is not None:
        values["checkpoint_step"] = _step_of(saved)
    ray.train.report(values, checkpoint=checkpoint, checkpoint_dir_name=saved.name if saved and attach else None)


def _step_of(path: Path) -> int:
    return int(path.name.rsplit("_", 1)[-1])


class RayReport(Callback):
    """Our trainer's checkpoints and metrics, reported to Ray Train (see the module docstring)."""

    def __init__(self, attach: bool = True) -> None:
        self.attach = attach
        self.pending: list[Path] = []
        """Committed checkpoints not reported yet (with ``checkpoint.async_save`` two can arrive at one step)."""
        self.validated = False
        """Whether a validation happened since the last report."""
        self.metrics: dict[str, float] = {}
        """The newest metrics row and validation metrics, reported with every report."""
        self.reported: Optional[int] = None
        self.last_saved: Optional[int] = None
        """The step of the newest checkpoint this worker group committed (for the failure line)."""

    def on_save(self, event: SaveEvent) -> None:
        self.pending.append(event.path)
        self.last_saved = event.step

    def on_validation(self, event: ValidationEvent) -> None:
        self.metrics.update(event.metrics)
        self.validated = True

    def on_step(self, event: StepEvent) -> None:
        if event.metrics is not None:
            self.metrics.update(event.metrics)
        if self.pending or self.validated:
            self._report(event.step, event.rank)

    def on_finish(self, event: FinishEvent) -> None:
        self.metrics.update(event.metrics)
        if self.pending or self.reported != event.step:
            self._report(event.step, event.rank)

    def _report(self, step: int, rank: int) -> None:
        """One report per pending checkpoint, oldest first (or one without a checkpoint)."""
        pending: list[Optional[Path]] = [*self.pending] or [None]
        for saved in pending:
            report(step, self.metrics, saved, rank, self.attach)
        self.pending, self.validated, self.reported = [], False, step


def script_reports(rank: int, attach: bool = True) -> list[Optional[int]]:
    """Report every checkpoint this process commits with ``save_checkpoint``/``save_sharded`` (a
    user's script) to Ray as it is committed; the returned list holds the newest saved step."""
    newest: list[Optional[int]] = [None]

    def saved(path: Path) -> None:
        newest[0] = step = _step_of(path)
        report(step, {}, path, rank, attach)

    on_checkpoint_saved(saved)
    return newest


def explained(exc: BaseException, rank: int, world: int, resumes: str, last_saved: Optional[int]) -> Optional[str]:
    """One line for a worker whose error is the effect of another worker's death, or None.

    Why: when a Ray Train worker dies (killed, out of memory, its node lost), the survivors fail
    in their next collective with gloo's "Connection reset by peer" or NCCL's abort, and Ray shows
    one of those as the run's error. The cause is the other worker; what happens next is Ray's.
    ``resumes`` says what the new group does (``resumes from run/checkpoints``)."""
    marker = peer_marker(f"{type(exc).__name__}: {exc}")
    if marker is None:
        return None
    saved = f"; newest checkpoint of this worker group: step {last_saved}" if last_saved is not None else ""
    return (
        f"rank {rank} of {world} stopped because another Ray Train worker of its group is gone ({marker}); that "
        "worker's own error or exit, which Ray shows for its process, is the cause. Ray Train, not neural_arch, "
        "restarts the whole worker group while RunConfig(failure_config=FailureConfig(max_failures=N)) allows, "
        f"and the new group {resumes}{saved}"
    )
