"""Build the next step's batch in a background thread while this step computes.

Used by trainer.py (``training.prefetch: true``, the default)::

    with Prefetcher(build) as ahead:
        for batch in sampler:
            data = ahead.take(batch)               # built ahead in the background, or now
            ahead.start(next_batch(sampler))       # the following step's, in the background
            ... train on data ...

Exactness does not depend on guessing right: ``take`` hands out what was built ahead only
when its ids are the ones asked for (same ids, same global size), and otherwise builds
them now, in the calling thread. ``build`` must be a pure function of the ids (the same
tensors whichever thread runs it, drawing nothing from torch's global random generator,
which threads share). One worker thread, one batch ahead: memory for one extra batch.
An exception in the background build is raised by the ``take`` that asks for that batch;
leaving the ``with`` block (end of the run, an error, a stop signal) waits for a build in
progress and stops the thread.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Callable, Generic, Optional, TypeVar

import neural_arch.distributed as nd

T = TypeVar("T")


def next_batch(sampler: nd.DistributedSampler) -> Optional[nd.IndexBatch]:
    """The batch ``sampler`` yields after the one it handed out last, read from a copy (the
    sampler's position, which checkpoints store, does not move); at the end of an epoch, the
    next epoch's first batch, as the trainer's loop continues."""
    probe = copy.copy(sampler)  # its state is plain numbers: the copy shares nothing that changes
    if probe.state_dict()["position"] >= probe.samples_per_epoch:
        probe.set_epoch(probe.epoch + 1)
    return next(iter(probe), None)


class Prefetcher(Generic[T]):
    """One batch built ahead by ``build(ids)`` in one worker thread."""

    def __init__(self, build: Callable[[nd.IndexBatch], T], enabled: bool = True) -> None:
        self.build = build
        self.enabled = enabled
        self._pool: Optional[ThreadPoolExecutor] = None
        self._ahead: Optional[tuple[nd.IndexBatch, Future[T]]] = None
        self.hits = 0
        """Batches handed out from the background build (the rest were built by ``take``)."""

    def __enter__(self) -> Prefetcher[T]:
        if self.enabled:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="neural_arch-prefetch")
        return self

    def __exit__(self, kind: Optional[type], error: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.close()

    def start(self, batch: Optional[nd.IndexBatch]) -> None:
        """Begin building ``batch`` in the background (None, or a disabled prefetcher: nothing)."""
        if self._pool is None or batch is None:
            return
        self._drop()
        self._ahead = (batch, self._pool.submit(self.build, batch))

    def take(self, batch: nd.IndexBatch) -> T:
        """``build(batch)``: the background result when it was built for these ids, else built now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            wanted, future = ahead
            if _same(wanted, batch):
                self.hits += 1
                return future.result()  # waits; re-raises the build's exception here
            _settle(future)  # another batch was guessed: let it finish before building in this thread
        return self.build(batch)

    def close(self) -> None:
        """Wait for a build in progress (its result and error are dropped) and stop the thread."""
        self._drop()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _drop(self) -> None:
        if self._ahead is not None:
            _settle(self._ahead[1])
            self._ahead = None


def _same(a: nd.IndexBatch, b: nd.IndexBatch) -> bool:
    return a.global_size == b.global_size and list(a) == list(b)


def _settle(future: Future[T]) -> None:
    """Wait for ``future``; its outcome is not wanted (a batch nobody asked for)."""
    future.cancel()
    try:
        future.result()
    except BaseException:  # noqa: BLE001 - a guess's failure is not the run's: the real batch is built again
        pass
