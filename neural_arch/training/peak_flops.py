"""The peak FLOP/s behind ``perf/mfu``: configured, or measured once per machine and cached.

Used by trainer.py::

    peak = rank_peak(device, cfg.logging.peak_flops, log, write=rank == 0)   # once per run; logged
    meter = IntervalMeter(world, rank, device, peak.value, tp, peak.raise_to)  # a row above it raises it

Why cached: a matmul timed at every start-up measures whatever else the machine is doing, so
the same run's MFU moved from 0.33 to 2.6 between runs. The measurement (``measured_peak_flops``:
a float32 ``SIZE``-square matmul, the best of ``REPEATS``) is taken once per machine and kept in
``~/.cache/neural_arch/peak_flops.json`` under the CPU model (or GPU name) and the process's
thread count, so every later run divides by the same number. If a run achieves more than that
peak, the peak was measured under load: it is raised to the achieved rate, in the run and in the
cache, and the log says so; MFU therefore never exceeds 1. ``logging.peak_flops`` (a datasheet
number) overrides all of this and is never written to the cache.
"""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from neural_arch.utils.atomic import commit_file

SIZE = 1024
"""Side of the measured matmul: large enough to run at the BLAS's full speed on a CPU core."""
REPEATS = 10
"""Timed products; the fastest one counts (the others met other work on the machine)."""
CACHE = Path.home() / ".cache" / "neural_arch" / "peak_flops.json"


@dataclass
class PeakFlops:
    """One rank's peak FLOP/s and where it came from."""

    value: float
    source: str
    """For the log: ``logging.peak_flops``, or the cache file and when the number was measured."""
    key: Optional[str] = None
    """This machine's entry in ``cache`` (None for a configured peak: never written)."""
    cache: Optional[Path] = None
    log: logging.Logger = logging.getLogger(__name__)
    write: bool = False
    """Whether this process updates the cache when the peak is raised (one rank per run)."""

    def describe(self) -> str:
        return f"{self.value:.4g} ({self.source})"

    def raise_to(self, achieved: float) -> None:
        """A rate above the peak was achieved: the peak was wrong. Raise it (and the cache entry,
        where ``write``) and say so in the log."""
        if achieved <= self.value:
            return
        self.log.warning(
            "achieved %.4g FLOP/s per rank, above the peak %s: the peak was too low (measured under load?); "
            "raised to %.4g%s",
            achieved,
            self.describe(),
            achieved,
            f" in {self.cache}" if self.write and self.key else "",
        )
        self.value = achieved
        if self.write and self.key and self.cache:
            _store(self.cache, self.key, achieved, "raised to an achieved rate")


def rank_peak(
    device: torch.device,
    configured: Optional[float],
    log: Optional[logging.Logger] = None,
    write: bool = False,
    cache: Optional[Path] = None,
    measure: Optional[Callable[[torch.device], float]] = None,
) -> PeakFlops:
    """``configured`` if set, else this machine's peak from ``cache`` (default ``CACHE``), measured
    (``measure``, default a matmul) and cached the first time; named in ``log``. ``write``: this
    process updates the cache when the peak is raised."""
    log = log or logging.getLogger(__name__)
    if configured:
        peak = PeakFlops(configured, "logging.peak_flops", log=log)
    else:
        cache = cache or CACHE
        key = machine_key(device)
        entry = _load(cache).get(key)
        if isinstance(entry, dict) and isinstance(entry.get("flops"), (int, float)) and entry["flops"] > 0:
            value, how = float(entry["flops"]), str(entry.get("how", "?"))
        else:
            value, how = (measure or measured_peak_flops)(device), f"measured {time.strftime('%Y-%m-%d')}"
            _store(cache, key, value, how)
        peak = PeakFlops(value, f"{cache} [{key}], {how}", key, cache, log, write)
    log.info("peak FLOP/s per rank: %s", peak.describe())
    return peak


def machine_key(device: torch.device) -> str:
    """What the peak depends on: the processor (CPU model or GPU name) and torch's thread count."""
    if device.type == "cuda":
        return f"cuda {torch.cuda.get_device_name(device)}"
    return f"cpu {_cpu_model()}, {torch.get_num_threads()} threads"


def measured_peak_flops(device: torch.device, size: int = SIZE, repeats: int = REPEATS) -> float:
    """FLOP/s of a float32 ``size``-square matmul on ``device``, the fastest of ``repeats``."""
    generator = torch.Generator(device=device).manual_seed(0)  # not the global stream: training's RNG is untouched
    a = torch.randn(size, size, device=device, generator=generator)
    b = torch.randn(size, size, device=device, generator=generator)
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        started = time.perf_counter()
        torch.mm(a, b)
        _sync(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load(cache: Path) -> dict:
    try:
        data = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or damaged: measured again and rewritten
    return data if isinstance(data, dict) else {}


def _store(cache: Path, key: str, flops: float, how: str) -> None:
    """Write the entry atomically; a cache that cannot be written (read-only home) only costs a
    measurement per run."""
    data = _load(cache)
    data[key] = {"flops": flops, "how": how}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        commit_file(cache, lambda f: f.write((json.dumps(data, indent=2) + "\n").encode()))
    except OSError:
        pass


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
