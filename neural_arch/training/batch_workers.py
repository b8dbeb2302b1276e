"""Build the training batches in DataLoader worker processes (``training.data_workers: N``).

Run: ``neural-arch train --config tiny --set training.data_workers=2``; in the
loop (trainer.py), ``batch_builder`` picks these workers, the prefetch thread or neither::

    with batch_builder(components) as ahead:
        inputs = ahead.take(batch)         # built by a worker for exactly these ids
        ahead.start(next_batch(sampler))   # a no-op here: the workers run ahead by themselves

Why the run stays bitwise that of ``data_workers: 0``: a worker runs the same ``step_inputs`` on
the same ids the main process would; the ids come from a copy of the run's sampler (the global
batches in the loop's order, across epochs, up to the last step), and ``take`` checks every
delivered batch's ids against the ones the loop asks for (a mismatch starts the workers again
from the asked batch). The run's own sampler, which checkpoints store, moves only as the loop
trains, so a resume on any world size continues at the right sample. The DataLoader seeds its
workers from its own generator, so starting them draws nothing from the global RNG the model uses.

Workers are forked (the task's data is shared copy-on-write, nothing is pickled), run one torch
thread each (torch's worker loop sets it; the rank keeps its own threads) and die with their rank
(``PR_SET_PDEATHSIG``): a SIGKILLed rank leaves no orphan behind, a finished run shuts them down.
On a GPU they build on the CPU and the main process moves the tensors to the device. ``batch()``
must be a pure function of the ids, as for the prefetch thread (nothing from the global RNG).
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import os
import signal
import sys
from functools import partial
from types import TracebackType
from typing import Any, Iterator, Optional, Union

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

import neural_arch.distributed as nd
from neural_arch.training.components import TrainingComponents
from neural_arch.training.prefetch import Prefetcher
from neural_arch.training.run_progress import global_batches
from neural_arch.training.step import step_inputs

Inputs = list[dict[str, torch.Tensor]]
PR_SET_PDEATHSIG = 1
"""prctl option (linux/prctl.h): the signal a process gets when the thread that forked it exits."""


def batch_builder(components: TrainingComponents) -> Union[BatchWorkers, Prefetcher[Inputs]]:
    """What builds the loop's batches: ``training.data_workers`` processes, else the prefetch
    thread (``training.prefetch``), else the loop itself (a disabled prefetcher)."""
    training = components.cfg.training
    if training.data_workers > 0:
        return BatchWorkers(components, training.data_workers)
    return Prefetcher(partial(step_inputs, components), enabled=training.prefetch)


class BatchWorkers:
    """``workers`` DataLoader processes building ``step_inputs`` of the coming global batches."""

    def __init__(self, components: TrainingComponents, workers: int) -> None:
        self.components = components
        self.workers = workers
        self._stream: Optional[Iterator[tuple[list[int], int, Inputs]]] = None
        self.hits = 0
        """Batches handed out as the workers delivered them (the rest needed a restart)."""

    def __enter__(self) -> BatchWorkers:
        return self

    def __exit__(self, kind: Optional[type], error: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    def start(self, batch: Optional[nd.IndexBatch]) -> None:
        """Nothing to do: the workers build ahead from the sampler's copy (the Prefetcher's interface)."""

    def take(self, batch: nd.IndexBatch) -> Inputs:
        """``step_inputs(components, batch)``, as built by a worker; the workers start at the first call."""
        delivered = self._next(batch)
        if delivered is not None and _matches(delivered, batch):
            self.hits += 1
            return self._on_device(delivered[2])
        # The loop asked for another batch than the stream's next (its sampler was moved, or the
        # stream ended): start again from this one. Never happens in the trainer's loop.
        self.close()
        delivered = self._next(batch)
        assert delivered is not None and _matches(delivered, batch), "a fresh stream starts at the asked batch"
        return self._on_device(delivered[2])

    def close(self) -> None:
        """Stop the workers (each gets its end-of-work sentinel and is joined)."""
        if self._stream is not None:
            # What the iterator's __del__ does; called here so that the workers are gone when
            # the trainer's ``with`` block ends, not whenever the garbage collector runs.
            self._stream._shutdown_workers()  # type: ignore[attr-defined]
            self._stream = None

    def _next(self, batch: nd.IndexBatch) -> Optional[tuple[list[int], int, Inputs]]:
        if self._stream is None:
            self._stream = iter(self._loader(batch))
        return next(self._stream, None)

    def _loader(self, first: nd.IndexBatch) -> DataLoader:
        run = self.components
        remaining = max(1, run.cfg.training.steps - run.step)  # nothing built past the last step
        return DataLoader(
            _StepInputs(_on_cpu(run)),
            batch_size=None,  # one item is one global batch's share, built whole by one worker
            sampler=_Coming(first, run.sampler, remaining),
            num_workers=self.workers,
            collate_fn=_as_is,
            pin_memory=run.device.type == "cuda",
            worker_init_fn=partial(_die_with, os.getpid()),
            multiprocessing_context="fork",  # the task and its data are shared, never pickled
            generator=torch.Generator().manual_seed(run.cfg.run.seed),  # not the global RNG
        )

    def _on_device(self, inputs: Inputs) -> Inputs:
        device = self.components.device
        if device.type == "cpu":
            return inputs
        return [{key: t.to(device, non_blocking=True) for key, t in part.items()} for part in inputs]


class _StepInputs(Dataset):
    """Item ``batch`` (an ``IndexBatch``): ``(ids, global size, step_inputs(components, batch))``."""

    def __init__(self, components: TrainingComponents) -> None:
        self.components = components

    def __getitem__(self, batch: nd.IndexBatch) -> tuple[list[int], int, Inputs]:  # type: ignore[override]
        return list(batch), batch.global_size, step_inputs(self.components, batch)


class _Coming(Sampler):
    """``first``, then the global batches the loop takes after it (``count`` in all)."""

    def __init__(self, first: nd.IndexBatch, sampler: nd.DistributedSampler, count: int) -> None:
        self.first, self.count = first, count
        self.probe = copy.copy(sampler)  # now, positioned after ``first``; its state is plain numbers
        if self.probe.state_dict()["position"] >= self.probe.samples_per_epoch:
            self.probe.set_epoch(self.probe.epoch + 1)  # as the loop's global_batches continues

    def __iter__(self) -> Iterator[nd.IndexBatch]:
        yield self.first
        batches = global_batches(copy.copy(self.probe))
        for _ in range(self.count - 1):
            yield next(batches)

    def __len__(self) -> int:
        return self.count


def _on_cpu(components: TrainingComponents) -> TrainingComponents:
    """What the workers build with: the run's components, or on a GPU the same on the CPU
    (without autocast, which on the device does not touch CPU ops either)."""
    if components.device.type == "cpu":
        return components
    cfg = components.cfg
    cpu_cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, precision="fp32"))
    return dataclasses.replace(components, cfg=cpu_cfg, device=torch.device("cpu"))


def _matches(delivered: tuple[list[int], int, Inputs], batch: nd.IndexBatch) -> bool:
    return delivered[0] == list(batch) and delivered[1] == batch.global_size


def _as_is(item: Any) -> Any:
    return item


def _die_with(rank_pid: int, worker_id: int) -> None:
    """In each worker: be killed when the rank's main thread exits, however it exits."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != rank_pid:  # the rank died before prctl took effect
        os._exit(1)
