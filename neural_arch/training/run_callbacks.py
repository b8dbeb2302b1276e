"""The trainer's side of user callbacks (callbacks.py): make the events, call the callbacks, agree on a stop.

Used by trainer.py, the same calls on every rank::

    hooks = RunCallbacks(callbacks, steps)
    hooks.saved(step, path, writer)          # after writer.save: on_save now, or once it is committed
    hooks.validated(step, metrics)           # on_validation
    hooks.stepped(step, lr, row, loss_sum)   # on_step
    signum = stop.agreed(force=..., asks=hooks.asks(writer))
    if hooks.agreed(stop.answers, writer):   # some rank's callback asked: stop early at this step
        reason = hooks.stop_reason()         # one gather, on every rank
    hooks.committed()                        # after any writer.wait(): on_save of the step it waited for
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import torch

import neural_arch.distributed as nd
from neural_arch.distributed.checkpoint import CheckpointWriter
from neural_arch.training.callbacks import Callback, FinishEvent, SaveEvent, StepEvent, ValidationEvent
from neural_arch.training.kubeflow_progress import with_trainjob_progress
from neural_arch.training.memory_snapshot import MemorySnapshots


class StepFunction(Callback):
    """``train(on_step=fn)``: ``fn(step)`` after every step (the keyword from before callbacks)."""

    def __init__(self, fn: Callable[[int], None]) -> None:
        self.fn = fn

    def on_step(self, event: StepEvent) -> None:
        self.fn(event.step)


class RunCallbacks:
    """A run's callbacks, the stop one of them asked for on this rank, the save awaiting its commit."""

    def __init__(self, callbacks: Sequence[Callback], steps: int) -> None:
        self.callbacks, self.steps = list(callbacks), steps
        self.asked: Optional[str] = None
        """The first reason a callback on this rank gave to stop (None: none asked)."""
        self.pending: Optional[tuple[int, Path]] = None
        """A background save not known to be committed yet: (step, its directory)."""

    @classmethod
    def for_run(
        cls, callbacks: Sequence[Callback], on_step: Optional[Callable[[int], None]], steps: int, memory_every: int = 0
    ) -> RunCallbacks:
        """Memory snapshots every ``memory_every`` steps where the launcher keeps them
        (memory_snapshot.py), the user's callbacks, ``train(on_step=fn)`` as one more, and in a Kubeflow
        TrainJob pod whose status server is set, a progress reporter (kubeflow_progress.py)."""
        # The snapshots first: a step's snapshot is taken as the step ends, whatever a user's
        # callback then does (waits, stops the run, or is where the rank dies).
        own = [*MemorySnapshots.for_run(memory_every), *callbacks]
        own += [StepFunction(on_step)] if on_step is not None else []
        return cls(with_trainjob_progress(own), steps)

    @property
    def rank(self) -> int:
        return nd.get_rank()  # the process group may start after this object

    def _ask(self, reason: str) -> None:
        if self.asked is None:
            self.asked = " ".join(str(reason).split()) or "a callback asked to stop"

    def stepped(self, step: int, lr: float, row: Optional[Mapping[str, float]], loss_sum: torch.Tensor) -> None:
        if self.callbacks:
            event = StepEvent(
                step=step, steps=self.steps, rank=self.rank, lr=lr, metrics=row, _loss_sum=loss_sum, _ask=self._ask
            )
            for callback in self.callbacks:
                callback.on_step(event)

    def validated(self, step: int, metrics: Mapping[str, float]) -> None:
        if self.callbacks:
            event = ValidationEvent(step=step, steps=self.steps, rank=self.rank, metrics=dict(metrics), _ask=self._ask)
            for callback in self.callbacks:
                callback.on_validation(event)

    def saved(self, step: int, path: Path, writer: CheckpointWriter) -> None:
        """After ``writer.save``: a synchronous save is committed now; a background one later.
        Tracked on every rank, with callbacks or none: the wait it leads to is collective."""
        self.pending = (step, path)
        if not writer.in_flight:
            self.committed()

    def committed(self) -> None:
        """After ``writer.wait()`` returned (every rank): the save it waited for is on disk."""
        if self.pending is None:
            return
        step, path = self.pending
        self.pending = None
        event = SaveEvent(step=step, steps=self.steps, rank=self.rank, path=path, _ask=self._ask)
        for callback in self.callbacks:
            callback.on_save(event)

    def asks(self, writer: CheckpointWriter) -> tuple[float, float]:
        """This rank's part of the stop agreement: (a callback asked to stop, its background write still runs)."""
        return float(self.asked is not None), float(self.pending is not None and writer.writing)

    def agreed(self, answers: Optional[tuple[float, ...]], writer: CheckpointWriter) -> bool:
        """After the stop agreement (``answers``: the maximum of ``asks`` over the ranks, None where
        none took place): a background save that every rank has finished writing is waited for
        (at once) and reported; whether some rank's callback asked to stop."""
        if answers is None:
            return False
        asked, writing = answers
        if self.pending is not None and not writing:
            writer.wait()
            self.committed()
        return bool(asked)

    def stop_reason(self) -> str:
        """Why the run stops early, the same on every rank (one gather: call on every rank)."""
        reasons = nd.all_gather_object(self.asked)
        named = [(rank, str(why)) for rank, why in enumerate(reasons) if why is not None]
        if len(named) == len(reasons) and len({why for _, why in named}) == 1:  # e.g. EarlyStopping
            return named[0][1]
        return "; ".join(f"rank {rank}: {why}" for rank, why in named)

    def finished(self, step: int, metrics: Mapping[str, float], stopped: Optional[tuple[int, int, str]]) -> None:
        """``stopped``: (step, steps, why) of a run a callback stopped early."""
        event = FinishEvent(step, self.steps, self.rank, dict(metrics), stopped[2] if stopped else None)
        for callback in self.callbacks:
            callback.on_finish(event)
