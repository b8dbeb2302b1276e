"""The two interrupted runs a tracking service must follow as one run (tests/training/test_mlflow.py, test_wandb.py).

Use: ``stopped_and_resumed(run, "logging.mlflow=true")`` (the long regression run, stopped by
SIGTERM after 3 metric rows and resumed to its ``STEPS``); ``killed_and_restarted(run,
"logging.mlflow=true")`` (20 steps on 2 ranks, a row each step; rank 1 is SIGKILLed after step 7
and the launcher restarts the group from the checkpoint of step 4, so steps 5-7 are trained twice).
``settings`` are ``key=value`` config overrides; ``env`` adds variables to the processes' environment.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Mapping, Optional

from tests.helpers.cli import cli
from tests.helpers.long_run import LONG, start, wait_for_rows
from tests.helpers.trainer_runs import BASE, launch_fault

KILLED_STEPS = 20
"""The killed and restarted run's steps, each one logged."""


def stopped_and_resumed(run: Path, *settings: str, env: Optional[Mapping[str, str]] = None) -> None:
    """The long run into ``run``, stopped by SIGTERM while training, then resumed to the end (both succeed)."""
    proc = start(run, "--set", *settings, env=env)
    wait_for_rows(run, 3, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert "stopped by signal 15" in (run / "logs" / "rank_0.log").read_text(), out + err
    resumed = cli("train", *LONG, "--set", f"run.dir={run}", *settings, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


def killed_and_restarted(run: Path, *settings: str, env: Optional[Mapping[str, str]] = None) -> None:
    """2 ranks into ``run``; rank 1 dies after step 7, the restarted group resumes from step 4 and finishes."""
    args = [*BASE, "--set", f"run.dir={run}", f"training.steps={KILLED_STEPS}", "logging.every_steps=1", *settings]
    proc = launch_fault("kill", 7, 2, *args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
