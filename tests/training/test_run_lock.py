"""One job per run directory: a second job exits 2 at once naming the holder; a dead holder frees it.

Run: ``.venv/bin/python -m pytest tests/training/test_run_lock.py -q``
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.helpers.cli import cli
from tests.helpers.long_run import LONG, start, wait_for_rows

pytestmark = pytest.mark.multiprocess  # every test here starts training processes


@pytest.mark.timeout(300)
def test_second_job_on_a_run_dir_exits_2_naming_the_holder_and_a_killed_holder_frees_it(tmp_path):
    run = tmp_path / "run"
    first = start(run, "--set", "training.steps=1000000")  # runs until killed below
    try:
        wait_for_rows(run, 2, first)
        for nproc in ("1", "2"):  # in the process itself; before a launcher starts any worker
            second = cli("train", *LONG, "--set", f"run.dir={run}", "--nproc-per-node", nproc)
            assert second.returncode == 2, second.stdout + second.stderr
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1 and f"pid {first.pid} on" in lines[0] and str(run) in lines[0], second.stderr
        # Workers started by our launcher directly (as torchrun would): exit 2, and no restart.
        script = os.path.join(os.path.dirname(sys.modules["neural_arch"].__file__), "cli", "train.py")
        launched = subprocess.run(
            [
                sys.executable,
                "-m",
                "neural_arch.distributed.launcher",
                "--nproc_per_node=2",
                "--max_restarts=3",
                script,
                *LONG,
                "--set",
                f"run.dir={run}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
        )
        assert launched.returncode != 0 and "a restart would give the same answer" in launched.stderr, launched.stderr
        assert "is in use by another job" in launched.stdout + launched.stderr
    finally:
        first.send_signal(signal.SIGKILL)  # as the OOM killer would: no chance to unlock
        first.wait(timeout=30)
    again = cli(
        "train", *LONG, "--set", f"run.dir={run}", "training.steps=5", "--resume", "none"
    )  # the lock is free again
    assert again.returncode == 0, again.stdout + again.stderr
