"""User callbacks: watch a run step by step, act on its validation and checkpoints, stop it early.

Use::

    from neural_arch.training.callbacks import Callback, EarlyStopping
    from neural_arch.training.trainer import train

    class PrintLR(Callback):
        def on_step(self, event):
            if event.rank == 0 and event.metrics is not None:   # a metrics row was logged at this step
                print(event.step, event.lr, event.metrics["train/loss"])

    train(cfg, callbacks=[EarlyStopping("val/loss", patience=3), PrintLR()])

Every rank calls every callback, in list order, at the same steps, with the same event (only
``StepEvent.rank_loss`` and ``rank`` differ per rank). Per step, in this order: ``on_save`` (a
checkpoint committed by then), ``on_validation`` (a step that validated), ``on_step``; after the
last step and the run's outputs, ``on_finish``. A callback may ask to stop with
``event.request_stop(reason)``, on any rank: the ranks agree on it where they already
synchronise (at once after a step that validated or saved, else within about half a second),
save that step, validate it and finish normally: the summary says ``stopped early at step N of
M`` and why, and ``train`` returns the final metrics. Nothing in a callback is saved in the
checkpoint: a run continued from its checkpoint starts its callbacks afresh. A run stopped
early and started again stays stopped, in one line, unless its checkpoint is named
(finished_run.py). An exception raised in a callback ends the run on that rank as the user's
error (the others then fail in their next collective, as on any error).

``EarlyStopping`` is the worked example; docs/callbacks.md shows a custom one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional

__all__ = ["Callback", "EarlyStopping", "FinishEvent", "SaveEvent", "StepEvent", "ValidationEvent"]


def _no_stop(reason: str) -> None:
    raise RuntimeError("this event was not made by the trainer: nothing to stop")


@dataclass(frozen=True, kw_only=True)
class _Stoppable:
    """What every event during training has: its step, and the way to ask for a stop."""

    step: int
    """The optimizer steps done so far (the same on every rank)."""
    steps: int
    """``training.steps``: where the run ends unless stopped."""
    rank: int
    """This process's rank (0 to world size - 1)."""
    _ask: Callable[[str], None] = field(default=_no_stop, repr=False, compare=False)

    def request_stop(self, reason: str) -> None:
        """Ask the run to stop after this step: saved, validated and finished normally. Any rank
        may ask; every rank stops at the same step. ``reason`` is shown in the summary."""
        self._ask(reason)


@dataclass(frozen=True, kw_only=True)
class StepEvent(_Stoppable):
    """After every optimizer step (and its save, validation and metrics row)."""

    lr: float
    """The learning rate for the next step (the same on every rank)."""
    metrics: Optional[Mapping[str, float]]
    """The metrics row logged at this step (``train/loss`` is the exact mean over the ranks and the
    steps since the previous row; validation metrics when it validated; ``lr``; ``perf/*``),
    the same on every rank; None at a step that logged no row (``logging.every_steps``)."""
    _loss_sum: Any = field(default=None, repr=False, compare=False)

    @property
    def rank_loss(self) -> float:
        """This rank's mean training loss over its own share of this step's global batch: differs
        per rank, and reading it waits for the accelerator (``metrics["train/loss"]`` is the global one)."""
        total = self._loss_sum
        return float(total[0] / total[1]) if total is not None and float(total[1]) else math.nan


@dataclass(frozen=True, kw_only=True)
class ValidationEvent(_Stoppable):
    """After a step that validated (``training.val_every`` and the last step)."""

    metrics: Mapping[str, float]
    """The exact validation metrics (``val/loss`` and the task's others), the same on every rank."""


@dataclass(frozen=True, kw_only=True)
class SaveEvent(_Stoppable):
    """Once a checkpoint is committed on disk (every rank): at once for a synchronous save; with
    ``checkpoint.async_save`` at the first point after the background write where the ranks agree
    (within about half a second), and at the latest before the next save, a stop or the end."""

    path: Path
    """The checkpoint's directory (``run.dir/checkpoints/step_NNNNNNNN``), complete: manifest written."""


@dataclass(frozen=True)
class FinishEvent:
    """At the end of a run that trained (every rank), after its outputs are written."""

    step: int
    """The last step (``training.steps``, or the step it stopped early at)."""
    steps: int
    rank: int
    metrics: Mapping[str, float]
    """The final validation metrics (what ``train`` returns), the same on every rank."""
    stopped_early: Optional[str]
    """Why the run stopped before ``steps`` (a callback's reason), or None."""


class Callback:
    """Subclass and override what you need: every method does nothing by default."""

    def on_step(self, event: StepEvent) -> None:
        """After every optimizer step."""

    def on_validation(self, event: ValidationEvent) -> None:
        """After every validation pass during training."""

    def on_save(self, event: SaveEvent) -> None:
        """Once a checkpoint is committed on disk."""

    def on_finish(self, event: FinishEvent) -> None:
        """At the end of the run, after the summary and the outputs."""


class EarlyStopping(Callback):
    """Stop when ``metric`` has not improved by more than ``min_delta`` for ``patience``
    validations in a row (``mode``: ``min`` for losses, ``max`` for scores).

    Decided from the validation metrics, which are the same on every rank, so every rank asks at
    the same step; that step validated, so the ranks agree at once and stop there."""

    def __init__(
        self, metric: str = "val/loss", patience: int = 3, min_delta: float = 0.0, mode: Literal["min", "max"] = "min"
    ) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"EarlyStopping: mode must be 'min' or 'max', not {mode!r}")
        if patience < 1:
            raise ValueError(f"EarlyStopping: patience must be at least 1, not {patience}")
        self.metric, self.patience, self.min_delta, self.mode = metric, patience, abs(min_delta), mode
        self.best: Optional[float] = None
        self.best_step: Optional[int] = None
        self.bad = 0
        """Validations in a row without an improvement."""

    def on_validation(self, event: ValidationEvent) -> None:
        if self.metric not in event.metrics:
            known = ", ".join(sorted(event.metrics))
            raise KeyError(f"EarlyStopping: no metric {self.metric!r} among the validation metrics ({known})")
        value = float(event.metrics[self.metric])
        better = self.best is None or (
            value < self.best - self.min_delta if self.mode == "min" else value > self.best + self.min_delta
        )
        if better:
            self.best, self.best_step, self.bad = value, event.step, 0
            return
        self.bad += 1
        if self.bad >= self.patience:
            event.request_stop(
                f"{self.metric} did not improve by more than {self.min_delta:g} for {self.patience} validation(s) "
                f"(best {self.best:.6g} at step {self.best_step})"
            )
