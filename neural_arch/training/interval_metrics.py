"""What each logging interval cost, on every rank: throughput, FLOP/s and MFU, memory, data wait.

Used by trainer.py::

    meter = IntervalMeter(world_size, rank, device, peak_flops)   # once
    meter.count_step(samples, data_wait, compute)         # every step (seconds on this rank)
    packed = meter.pack(loss_sum)                         # before the log row's one all-reduce
    row = meter.row(nd.all_reduce(packed), tokens_per_sample)   # every rank: the same numbers

The loop already sums (loss, samples) over ranks once per metrics row; the per-rank numbers
travel in the same SUM all-reduce, each rank writing only its own slots, so every rank learns
every rank's data wait, compute time and peak memory at no extra collective. FLOPs per step are
counted once (``first_step_flops`` around the first step, with ``torch.utils.flop_counter``'s formulas); the peak is
``logging.peak_flops`` or this machine's cached measurement (``peak_flops.py``). MFU is the
achieved FLOP/s over the peak of all ranks together, never above 1: a row that achieves more
raises the peak to its rate (``on_peak_raised``: the trainer logs and caches it). Every rank
counts what it runs (its share of the batch) and the counts are summed; tensor-parallel peers
count their DTensor ops whole, so each adds its count divided by their number. Pipelines are not counted yet: a pipeline
step's count does not match one process's (it comes out higher), so their rows have no FLOP/s
or MFU rather than a wrong one.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from neural_arch.training.peak_flops import rank_peak  # noqa: F401 - the meter's peak, re-exported for trainer.py

FIRST = 2
"""Slots before the per-rank ones: this rank's (loss sum, samples) since the last row."""
PER_RANK = 4
"""Per-rank slots: data wait, compute and forward seconds per step, peak memory bytes."""


class IntervalMeter:
    """This rank's costs since the last metrics row, and the FLOPs of one step (all ranks)."""

    def __init__(
        self,
        world_size: int,
        rank: int,
        device: torch.device,
        peak_flops: Optional[float],
        tp_size: int = 1,
        on_peak_raised: Optional[Callable[[float], None]] = None,
    ) -> None:
        self.world_size, self.rank, self.device, self.peak_flops = world_size, rank, device, peak_flops
        self.tp_size = tp_size
        """Tensor-parallel peers: each counts the same whole DTensor ops, so each adds 1/tp_size."""
        self.on_peak_raised = on_peak_raised
        """Told the new peak per rank when a row achieved more than the peak (MFU <= 1 by construction)."""
        self.step_flops: Optional[float] = None
        """This rank's FLOPs of one step, once counted."""
        self.forward_per_rank: list[float] = []
        """Every rank's mean forward seconds per step in the last row (stragglers.py)."""
        self._reset()

    def count_step(self, samples: int, data_wait: float, compute: float, forward: float) -> None:
        """Add one finished step: its global batch size and this rank's seconds waiting for data,
        computing (forward, backward, optimizer) and in forward passes alone (before any sync)."""
        self.steps += 1
        self.samples += samples
        self.data_wait += data_wait
        self.compute += compute
        self.forward += forward

    def pack(self, loss_sum: torch.Tensor) -> torch.Tensor:
        """The float64 vector to SUM over ranks: (loss sum, samples), then each rank's own slots."""
        packed = torch.zeros(FIRST + PER_RANK * self.world_size + 1, dtype=torch.float64)
        packed[:FIRST] = loss_sum
        at = FIRST + PER_RANK * self.rank
        steps = max(self.steps, 1)
        packed[at : at + PER_RANK] = torch.tensor(
            [self.data_wait / steps, self.compute / steps, self.forward / steps, peak_memory(self.device)]
        )
        packed[-1] = (self.step_flops or 0.0) / self.tp_size
        return packed

    def row(self, total: torch.Tensor, tokens_per_sample: Optional[int]) -> dict[str, float]:
        """The interval's numbers from the summed vector (the same on every rank); starts the next interval."""
        ranks = total[FIRST:-1].reshape(self.world_size, PER_RANK)
        # Throughput per training step (rank 0's mean step: data wait + compute), so an interval
        # that also validated or saved reports the speed of its steps, not of its wall time.
        step_seconds = max(float(ranks[0, 0] + ranks[0, 1]), 1e-12)
        samples_per_step = self.samples / max(self.steps, 1)
        values = {
            "perf/samples_per_s": samples_per_step / step_seconds,
            "perf/step_s": step_seconds,
            "perf/data_wait_s": float(ranks[:, 0].max()),
            "perf/peak_memory_gib": float(ranks[:, 3].max()) / 2**30,
        }
        if tokens_per_sample:
            values["perf/tokens_per_s"] = samples_per_step * tokens_per_sample / step_seconds
        if float(total[-1]):  # FLOPs of one step, summed over the ranks
            flops = float(total[-1]) / step_seconds
            values["perf/flops_per_s"] = flops
            if self.peak_flops:
                if flops / self.world_size > self.peak_flops:  # the peak was too low (peak_flops.py): raise it
                    self.peak_flops = flops / self.world_size
                    if self.on_peak_raised is not None:
                        self.on_peak_raised(self.peak_flops)
                values["perf/mfu"] = min(1.0, flops / (self.peak_flops * self.world_size))
        self.forward_per_rank = [float(f) for f in ranks[:, 2]]
        for rank in range(self.world_size):
            values[f"perf/compute_s/rank{rank}"] = float(ranks[rank, 1])
            values[f"perf/forward_s/rank{rank}"] = self.forward_per_rank[rank]
        self._reset()
        return values

    def _reset(self) -> None:
        self.steps = self.samples = 0
        self.data_wait = self.compute = self.forward = 0.0


@contextlib.contextmanager
def first_step_flops(meter: IntervalMeter, countable: bool = True) -> Iterator[None]:
    """Count the FLOPs of the step run inside, once per process (a later step, or one that is not
    ``countable``, runs untouched)."""
    if meter.step_flops is not None or not countable:
        yield
        return
    counter = FlopCounter()
    with counter:
        yield
    meter.step_flops = counter.total or None


class FlopCounter(TorchDispatchMode):
    """FLOPs of the operations ``torch.utils.flop_counter`` has formulas for (matmuls,
    convolutions, attention), in forward and backward: ``with FlopCounter() as c: ...; c.total``.

    Why not ``FlopCounterMode``: its per-module breakdown hooks autograd in a way a pipeline
    stage's backward (``autograd.grad``) refuses. An operation on DTensors is counted once,
    with its global shapes (its local operations run below this mode)."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.registry, self.total = flop_registry, 0.0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.registry.get(func._overloadpacket)
        # Meta tensors only carry shapes (a pipeline stage infers its shapes on them): no work.
        if formula is not None and not any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
            self.total += float(formula(*args, **kwargs, out_val=out))
        return out


def peak_memory(device: Optional[torch.device] = None) -> float:
    """Bytes: ``torch.cuda.max_memory_allocated`` on CUDA, else this process's peak RSS (``VmHWM``)."""
    if device is not None and device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 0.0
