"""The launcher's temporary directory, removed when the job ends, however the launcher ends.

Use: ``with ScratchDir() as path: ...`` (``DistributedLauncher`` keeps the ranks' logs, when
no ``--log-dir`` is given, and torch elastic's per-attempt error files in it). Run by path,
``python scratch.py DIR`` is the cleaner that ``ScratchDir`` starts; not meant for people.

Why a cleaner process: a launcher killed by SIGKILL runs no ``finally``, so without it every
such job would leave a ``/tmp/neural_arch_*`` directory behind. The cleaner holds the read end of
a pipe whose write end only the launcher holds, so when the launcher exits, in any way,
the cleaner reads end-of-file, removes the directory and exits. It runs in a session of
its own and ignores SIGINT/SIGTERM/SIGHUP, so the Ctrl-C or ``kill`` that stops a job does
not stop the cleanup. Like ``logpump.py`` it imports only the standard library and is run
by path (``-m`` would import the package, and torch, first).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Optional

PREFIX = "neural_arch_"
CLEANER_WAIT = 10.0
"""Seconds ``__exit__`` waits for the cleaner, which has nothing left to do by then."""
TORCH_CACHE = "torchinductor_"
"""torch's own compile cache, ``$TMPDIR/torchinductor_$USER``, made when ``torch._dynamo`` is
imported (torch's DDP constructor does): one per user, reused by every run, by design not
removed. Not a temp dir of a job's."""


def leftovers(tmp: Path) -> list[Path]:
    """What a finished job left in the temp dir ``tmp``: everything but torch's compile cache."""
    return sorted(p for p in tmp.iterdir() if not p.name.startswith(TORCH_CACHE))


class ScratchDir:
    """A fresh directory under the system's temp dir, gone after the ``with`` block or the process."""

    def __init__(self, prefix: str = PREFIX) -> None:
        self.prefix = prefix
        self.path: Optional[Path] = None
        self._write_fd = -1
        self._cleaner: Optional[subprocess.Popen] = None

    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(prefix=self.prefix))
        read_fd, self._write_fd = os.pipe()  # not inheritable: workers must not keep the pipe open
        self._cleaner = subprocess.Popen(
            [sys.executable, __file__, str(self.path)],
            stdin=read_fd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )
        os.close(read_fd)
        return self.path

    def __exit__(self, kind: Optional[type], value: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        if self._write_fd >= 0:
            os.close(self._write_fd)  # the cleaner reads end-of-file and exits
            self._write_fd = -1
        if self._cleaner is not None:
            try:
                self._cleaner.wait(timeout=CLEANER_WAIT)
            except subprocess.TimeoutExpired:
                pass  # it exits on its own; not worth failing the job for


def clean_when_launcher_exits(path: str) -> None:
    """The cleaner: wait for end-of-file on stdin (the launcher's pipe), then remove ``path``."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while os.read(0, 4096):
        pass
    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    clean_when_launcher_exits(sys.argv[1])
