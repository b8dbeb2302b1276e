"""Profiles on request: ``torch.profiler`` over a window of steps, one trace per chosen rank.

Used by trainer.py::

    with StepProfiler(cfg.profiling, rank, run_dir, device, start_step) as profiler:
        ...                       # each step
        profiler.after_step(step)  # opens the window before ``first_step``, closes it after ``steps``

Config (``profiling:``): ``first_step`` (null: off), ``steps``, ``ranks``. Each chosen rank writes
``RUN_DIR/profiles/rank<R>.<time>.pt.trace.json`` (Chrome trace format: open it in Perfetto, or
point TensorBoard's profiler plugin at ``RUN_DIR/profiles``). On CUDA a profiled rank also records
its allocations, and an out-of-memory error during the run writes ``profiles/rank<R>_oom.pickle``
first (``torch.cuda.memory``'s snapshot; drag it into pytorch.org/memory_viz).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch


@dataclass
class ProfilingConfig:
    first_step: Optional[int] = None
    """Profile from this step on (1 = the first step of the run); null: no profiling."""
    steps: int = 3
    """How many steps the window covers."""
    ranks: list[int] = field(default_factory=lambda: [0])
    """Which global ranks write a trace (the others run unprofiled)."""


class StepProfiler:
    """The profiler of one rank over the configured window (a no-op outside it or on other ranks)."""

    def __init__(self, cfg: ProfilingConfig, rank: int, run_dir: Path, device: torch.device, step: int) -> None:
        """``step``: the step the run starts from (0, or the resumed one)."""
        self.cfg, self.rank, self.device, self.start_step = cfg, rank, device, step
        self.folder = run_dir / "profiles"
        self.enabled = cfg.first_step is not None and rank in cfg.ranks
        self._profile: Optional[Any] = None
        self._done = 0

    def __enter__(self) -> StepProfiler:
        if self.enabled and self.device.type == "cuda":
            torch.cuda.memory._record_memory_history()  # for the snapshot an OOM writes
        if self.enabled and self.cfg.first_step == self.start_step + 1:
            self._start()
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if isinstance(error, torch.cuda.OutOfMemoryError) and self.enabled:
            self.folder.mkdir(parents=True, exist_ok=True)
            torch.cuda.memory._dump_snapshot(str(self.folder / f"rank{self.rank}_oom.pickle"))
        if self._profile is not None:  # the run ended inside the window: keep what was recorded
            self._profile.__exit__(None, None, None)
            self._profile = None

    def after_step(self, step: int) -> None:
        """Call after step ``step`` finished: starts the window before ``first_step``, ends it after ``steps``."""
        if not self.enabled:
            return
        if self._profile is None and step + 1 == self.cfg.first_step:
            self._start()
        elif self._profile is not None:
            self._done += 1
            if self._done == self.cfg.steps:
                self._profile.__exit__(None, None, None)  # writes the trace (on_trace_ready)
                self._profile = None

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self.folder.mkdir(parents=True, exist_ok=True)
        handler = tensorboard_trace_handler(str(self.folder), worker_name=f"rank{self.rank}")
        self._profile = profile(activities=activities, record_shapes=True, on_trace_ready=handler)
        self._profile.__enter__()
