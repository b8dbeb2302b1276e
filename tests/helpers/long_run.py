"""A training run long enough to be signalled, stopped or locked while it is under way.

Use: ``proc = start(run, "--nproc-per-node", "2")``; ``wait_for_rows(run, 3, proc)`` (training
has logged 3 metric rows); then signal ``proc``. ``cli("train", *LONG, ...)`` (tests.helpers.cli)
runs the same command to the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, Optional

from tests.helpers.trainer_runs import BASE

STEPS = 3000
"""About 1.5 ms a step on one process: time for a signal to land mid-run."""
LONG = [*BASE, "--set", f"training.steps={STEPS}", "logging.every_steps=50", "checkpoint.every_steps=1000"]
"""The regression run of ``STEPS`` steps, a metric row every 50."""


def start(run: Path, *extra: str, env: Optional[Mapping[str, str]] = None) -> subprocess.Popen[str]:
    """``neural-arch train`` of ``LONG`` into ``run``, started and left running (pipes for its output);
    ``env`` adds variables to this process's environment."""
    cmd = [sys.executable, "-m", "neural_arch.cli", "train", *LONG, "--set", f"run.dir={run}", *extra]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env or {})),
    )


def wait_for_rows(run: Path, rows: int, proc: Optional[subprocess.Popen[str]] = None, timeout: float = 120) -> None:
    """Until the run's metrics.jsonl has ``rows`` lines (training is under way); fails if
    ``proc`` ends first or ``timeout`` seconds pass."""
    metrics, deadline = run / "metrics.jsonl", time.monotonic() + timeout
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= rows):
        assert proc is None or proc.poll() is None, proc.communicate() if proc else ""
        assert time.monotonic() < deadline, f"no {rows} metric rows in {timeout} s"
        time.sleep(0.1)
