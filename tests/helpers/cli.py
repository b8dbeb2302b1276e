"""Run ``neural-arch`` from a test: in a fresh process as a user does, or in this one.

Use: ``proc = cli("train", "--set", f"run.dir={tmp_path}")`` -> ``CompletedProcess`` (text);
``code, out, err = run_main(["env"], capsys)`` for a quick check of a mistake or a printout.
``cli`` runs ``python -m neural_arch.cli`` with one OpenMP thread a process (2 shared cores)
and unbuffered output (a rank's last lines reach the log even when it is killed).
``launch("--nproc_per_node=2", script, ...)`` runs the launcher (``LAUNCHER``) the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from neural_arch.cli import main

LAUNCHER = [sys.executable, "-m", "neural_arch.distributed.launcher"]
"""The launcher as a user starts it (``python -m``), for tests that need a ``Popen``."""


def cli(
    *args: str, timeout: float = 240, cwd: Optional[Path] = None, env: Optional[Mapping[str, str]] = None
) -> subprocess.CompletedProcess[str]:
    """``neural-arch ARGS`` in a fresh process: its exit status, stdout and stderr.

    ``env`` adds variables to this process's environment (e.g. ``PYTHONPATH``); ``timeout``
    (seconds) raises ``subprocess.TimeoutExpired`` instead of letting a hang block the suite.
    """
    variables = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "neural_arch.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=variables,
    )


def launch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m neural_arch.distributed.launcher ARGS`` in a fresh process (unbuffered output)."""
    variables = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(LAUNCHER + list(args), capture_output=True, text=True, timeout=timeout, env=variables)


def run_main(argv: Sequence[str], capsys: Any) -> tuple[Any, str, str]:
    """(exit status, stdout, stderr) of ``neural-arch ARGV`` run in this process (pytest's ``capsys``)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse exits; the console script turns that into the status
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
