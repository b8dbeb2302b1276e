"""Symlinks planted in a run directory never make the trainer write outside it, and the
lock file (it holds a command line) is private.

Run: ``.venv/bin/python -m pytest tests/training/test_run_dir_symlinks.py -q``
Each case links one file of the run directory to a file outside it; the trainer's writer
must refuse the link and leave the outside file's bytes as they were.
"""

import os
import stat

import pytest

from neural_arch.training.jsonl import append_row
from neural_arch.training.reporting import RunReporter
from neural_arch.training.run_lock import RunDirLock
from neural_arch.training.sample_log import append_samples
from neural_arch.training.typed_config import ConfigError


@pytest.fixture
def victim(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("do not touch\n")
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    return run, outside


def test_lock_file_symlink_is_refused_not_truncated(victim):
    run, outside = victim
    (run / ".lock").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"its lock file .*/\.lock is a symlink; remove it") as raised:
        RunDirLock.acquire(run)
    assert "\n" not in str(raised.value)
    assert outside.read_text() == "do not touch\n"


def test_the_run_dir_keeps_the_umask_and_only_the_lock_file_is_private(tmp_path):
    # docs/security.md: the lock holds a command line (0600); the run directory holds
    # checkpoints and metrics, no secret, so it is made as the user's umask says.
    old = os.umask(0o022)
    try:
        lock = RunDirLock.acquire(tmp_path / "new" / "run")
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE((tmp_path / "new" / "run").stat().st_mode) == 0o755
        assert stat.S_IMODE((tmp_path / "new" / "run" / ".lock").stat().st_mode) == 0o600
    finally:
        lock.release()


def test_lock_file_is_private(tmp_path):
    (tmp_path / ".lock").write_text("")  # an older run's, 0644
    lock = RunDirLock.acquire(tmp_path)
    try:
        assert stat.S_IMODE((tmp_path / ".lock").stat().st_mode) == 0o600
    finally:
        lock.release()


@pytest.mark.parametrize(
    "name, write",
    [
        ("metrics.jsonl", lambda run: append_row(run / "metrics.jsonl", {"step": 1})),
        ("logs/samples_rank_0.jsonl", lambda run: append_samples(run, 0, 1, [3])),
        ("logs/rank_0.log", lambda run: RunReporter(run, 0, 2, 0, False, False).log.info("x")),
    ],
)
def test_appended_files_do_not_follow_symlinks(victim, name, write):
    run, outside = victim
    (run / name).symlink_to(outside)
    with pytest.raises(OSError, match="is a symlink, which is not followed"):
        write(run)
    assert outside.read_text() == "do not touch\n"
