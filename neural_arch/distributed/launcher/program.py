"""What a worker runs: a Python file, a module (``-m``) or an executable (``--no-python``).

Use: ``check_program("train.py", "script")`` before starting anything (the launcher's
preflight: a typo exits 2 at once, not N tracebacks later); ``run_program(...)`` inside a
worker (``worker.py``) runs it and returns its exit code.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import shutil
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Sequence

from neural_arch.distributed.launcher.lifeline import KERNEL_WATCH, die_with_parent


def check_program(script: str, run_as: str) -> None:
    """``ValueError`` naming what is wrong when ``script`` cannot be run ``run_as``."""
    if run_as == "module":
        try:
            found = importlib.util.find_spec(script)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise ValueError(
                f"module {script!r} not found (with -m the script is a module name, e.g. my_pkg.train, "
                "importable from the current directory)."
            )
    elif run_as == "executable":
        if shutil.which(script) is None:
            raise ValueError(
                f"executable {script!r} not found or not executable (with --no-python the script is a "
                "program: give its path or put it on PATH, and chmod +x it)."
            )
    elif not Path(script).is_file():
        raise ValueError(f"script {script!r} not found; pass the path of a Python file (or -m MODULE).")


def run_python(script: str, args: Sequence[str], run_as: str) -> None:
    """Run ``script`` in this interpreter as ``__main__`` (exceptions propagate, as from python)."""
    sys.argv = [script, *args]
    if run_as == "module":
        sys.path.insert(0, os.getcwd())  # as `python -m`: the current directory comes first
        runpy.run_module(script, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, str(Path(script).resolve().parent))
        runpy.run_path(script, run_name="__main__")


def run_executable(program: str, args: Sequence[str]) -> int:
    """Run ``program`` as a child sharing this worker's output; its exit code. A child killed
    by a signal kills this worker with the same signal, so the launcher reports it as such."""
    # The program dies with this worker, as the worker dies with the launcher (lifeline.py).
    code = subprocess.call([program, *args], preexec_fn=partial(die_with_parent, os.getpid()) if KERNEL_WATCH else None)
    if code < 0:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code
