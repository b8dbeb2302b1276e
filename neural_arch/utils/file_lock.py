"""An advisory lock on an open file: ``lock_file(fd, exclusive, timeout)``.

Try it::

    >>> import os
    >>> from neural_arch.utils.file_lock import lock_file
    >>> lock_file(os.open("/tmp/x", os.O_RDWR | os.O_CREAT), timeout=0)
    True

Use::

    if not lock_file(fd, exclusive=True, timeout=0):  # one try: someone else holds it
        ...
    lock_file(fd, exclusive=False, timeout=5.0)       # wait up to 5 s for a writer to finish

Why ``flock``: the lock belongs to the open file, so the kernel releases it when the last
descriptor of that file closes, including when its holder is killed by SIGKILL or the OOM
killer; no stale lock is ever left to clean up. A child that inherits the descriptor
shares the lock (the launcher's log pump relies on this). Used for the run directory's
lock (``training/run_lock.py``) and the ranks' log files (``distributed/launcher/log_format.py``).
"""

from __future__ import annotations

import fcntl
import time

POLL_SECONDS = 0.02
"""How often a waiting caller tries again: ``flock`` with a timeout does not exist, and a
blocking ``flock`` could wait forever on a holder that never lets go."""


def lock_file(fd: int, exclusive: bool = True, timeout: float = 0.0) -> bool:
    """Take an exclusive (one writer) or shared (many readers) lock on the open file ``fd``,
    trying again every ``POLL_SECONDS`` for up to ``timeout`` seconds (0: one try). True once
    held; False if another open file still held a conflicting lock when time ran out."""
    deadline = time.monotonic() + timeout
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    while True:
        try:
            fcntl.flock(fd, mode)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)
