"""What one run measures on its way: throughput, step times, the logged loss, what was saved.

Used by trainer.py: ``progress = RunProgress(resumed_from=step)``, then ``progress.count(...)`` per step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

import neural_arch.distributed as nd


@dataclass
class RunProgress:
    """What the loop measures on the way: throughput, step times, the logged loss, what was saved."""

    resumed_from: Optional[int]
    started: float = field(default_factory=time.perf_counter)
    samples: int = 0
    step_times: list[float] = field(default_factory=list)
    since_log: torch.Tensor = field(default_factory=lambda: torch.zeros(2, dtype=torch.float64))
    """(loss sum, samples) on this rank since the last metrics row."""
    loss: float = float("nan")
    """The exact global mean training loss of the last metrics row."""
    last_saved: Optional[int] = None
    validated: Optional[tuple[int, dict[str, float]]] = None
    """(step, metrics) of the last validation pass, so the end of the run does not repeat it."""

    def count(self, batch: nd.IndexBatch, loss_sum: torch.Tensor, seconds: float) -> None:
        """Add one finished step: its global batch, this rank's (loss sum, samples) and its time."""
        self.since_log += loss_sum
        self.step_times.append(seconds)
        self.samples += batch.global_size


def global_batches(sampler: nd.DistributedSampler) -> Iterator[nd.IndexBatch]:
    """The sampler's global batches from its current position on, epoch after epoch."""
    while True:
        yield from sampler
        sampler.set_epoch(sampler.epoch + 1)
