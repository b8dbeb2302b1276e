"""A rank's log that is a symlink is never written through: the launcher refuses it.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_log_symlink.py -q``
Why: ``--log_dir`` may be a run directory someone else prepared; a planted
``rank_0.log -> ~/.bashrc`` must not get the job's output appended to it.
"""

import subprocess
import sys

import pytest


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_symlinked_rank_log_is_not_followed(tmp_path):
    logs, victim = tmp_path / "logs", tmp_path / "victim.txt"
    logs.mkdir()
    victim.write_text("keep\n")
    (logs / "rank_0.log").symlink_to(victim)
    script = tmp_path / "hello.py"
    script.write_text("print('hello from the job')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "neural_arch.distributed.launcher", "--nproc_per_node=1", "--max_restarts=0"]
        + [f"--log_dir={logs}", str(script)],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert victim.read_text() == "keep\n"
    assert proc.returncode != 0 and "is a symlink" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
