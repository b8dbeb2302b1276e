"""A worker dies with the launcher that started it, however the launcher dies.

Use: ``die_with_parent(launcher_pid)`` first thing in a worker (``worker.py`` does, with the
pid the launcher passes as ``--parent-pid``); ``subprocess.call(cmd, preexec_fn=...)`` with
``partial(die_with_parent, os.getpid())`` ties a child the worker starts to the worker.

Why: a launcher killed by SIGKILL (the OOM killer, a cancelled job step, ``kill -9``) cannot
stop its workers, and torch elastic's workers (torchrun's too) then train on unsupervised,
pruning checkpoints under the next run of the same command. On Linux the kernel sends
SIGKILL to this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``). The parent may
already have died before the call (the worker imports torch first, seconds): then this
process has been re-parented, ``getppid()`` differs, and it exits at once. Elsewhere a
daemon thread checks the parent once a second instead.

The kernel's signal follows the parent *thread* that started this process; the launcher
starts workers from the thread that runs the job (``DistributedLauncher.launch``), which
lives until the job ends.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from typing import Optional

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""
POLL_SECONDS = 1.0


def _load_prctl() -> Optional[object]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
"""Looked up once at import: a ``preexec_fn`` then only calls it (no library loading after fork)."""
KERNEL_WATCH = _PRCTL is not None
"""Whether the kernel watches the parent here (Linux); only then is ``die_with_parent`` fit for
a ``preexec_fn`` (elsewhere it starts a thread, which an exec would end anyway)."""


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when ``parent_pid`` (its parent) dies; if it is gone already, now."""
    armed = _PRCTL is not None and _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0  # type: ignore[operator]
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked to watch it
        os.kill(os.getpid(), signal.SIGKILL)
    if not armed:
        import threading  # only here: the worker wrapper imports no threading before the script

        threading.Thread(target=_watch_parent, args=(parent_pid,), name="die-with-parent", daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_SECONDS)
    os.kill(os.getpid(), signal.SIGKILL)
