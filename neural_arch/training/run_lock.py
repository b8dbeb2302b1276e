"""One job per run directory: an exclusive lock that the kernel releases when its holder dies.

Used by trainer.py (rank 0 holds ``RunDirLock(run_dir)`` for the job's life) and by
``neural-arch train`` before it starts any worker (``RunDirLock.probe(run_dir)``)::

    lock = RunDirLock.acquire(Path("runs/mine"))  # ConfigError naming the holder if taken
    ...
    lock.release()

Why: two jobs in one run directory (a resubmitted job while the first still runs, or
workers orphaned by a killed launcher) prune and overwrite each other's checkpoints. An
``flock`` on ``RUN_DIR/.lock`` is held by an open file, so a crash, SIGKILL or OOM kill
frees it at once and a restarted job takes it again; no stale-lock cleanup is ever needed.
The file records who holds it (pid, host, command) for the error message.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from pathlib import Path
from typing import Optional

from neural_arch.training.typed_config import ConfigError
from neural_arch.utils.file_lock import lock_file
from neural_arch.utils.safe_files import open_no_follow

LOCK_FILE = ".lock"


class RunDirLock:
    """An exclusive lock on a run directory (hold the object: closing its file releases it)."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: Optional[int] = fd
        self.path = path

    @classmethod
    def acquire(cls, run_dir: Path) -> RunDirLock:
        """Take the lock of ``run_dir`` (created if missing) or raise a one-line ``ConfigError``."""
        path = run_dir / LOCK_FILE
        try:  # not through a symlink (truncating its target), and 0600: it holds a command line
            run_dir.mkdir(parents=True, exist_ok=True)
            fd = open_no_follow(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(f"run.dir={str(run_dir)!r} cannot be used: {_why(run_dir, exc)}") from None
        os.fchmod(fd, 0o600)  # a lock file from before kept 0644
        if not lock_file(fd, exclusive=True, timeout=0):
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(
                f"run.dir={str(run_dir)!r} is in use by another job ({holder}); wait for it to end, "
                "stop it, or choose another run.dir"
            )
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}: {' '.join(sys.argv)[:300]}\n".encode())
        return cls(fd, path)

    @classmethod
    def probe(cls, run_dir: Path) -> None:
        """Raise the ``ConfigError`` of ``acquire`` if another job holds ``run_dir`` now or it cannot
        be created or written (a file, under a file, read-only); hold nothing. Creates ``run_dir``."""
        cls.acquire(run_dir).release()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _why(run_dir: Path, exc: OSError) -> str:
    """What is wrong with ``run_dir``, and the fix, from the error creating it or its lock file."""
    if run_dir.exists() and not run_dir.is_dir():
        return "it is a file, not a directory; choose another run.dir or move the file away"
    if isinstance(exc, NotADirectoryError):
        return "a part of its path is a file, not a directory; choose another run.dir"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"it is not writable ({exc.strerror}); choose a directory you can write to"
    if exc.errno == errno.ELOOP:
        return f"its lock file {run_dir / LOCK_FILE} is a symlink; remove it"
    return f"{exc.strerror or exc}; choose another run.dir"
