"""Every thread's Python stack into a rank's log, when the launcher asks, before it stops a group.

Used by worker.py (``dump_stacks_on_request(log)`` at start-up) and agent.py (sends
``STACKS_SIGNAL`` to every worker before it stops a failed or hung group). ``faulthandler``
writes from its C signal handler, so a worker blocked inside a C++ collective, or stopped
(SIGSTOP: the signal is delivered as it is woken, before its own code runs on), still writes
where each of its threads is. The failure summary quotes the main thread's innermost frames.
"""

from __future__ import annotations

import faulthandler
import io
import signal
import time
from pathlib import Path
from typing import Optional

STACKS_SIGNAL = signal.SIGUSR2
"""What the launcher sends a worker to have it write its threads' stacks into its rank log."""


def dump_stacks_on_request(log: Optional[Path]) -> Optional[io.TextIOBase]:
    """From now on ``STACKS_SIGNAL`` writes every thread's stack to ``log`` and the process goes
    on; returns the open log file (close it at exit), or None without a log (the signal is then ignored)."""
    if log is None:
        signal.signal(STACKS_SIGNAL, signal.SIG_IGN)
        return None
    out = open(log, "a")  # noqa: SIM115 - held open for faulthandler until the script ends
    faulthandler.register(STACKS_SIGNAL, file=out, all_threads=True, chain=False)
    return out


def await_delivery(pids: list[int], signum: int, deadline: float) -> None:
    """Wait until no process of ``pids`` still has ``signum`` pending (or ``deadline``): a signal
    leaves the pending set as its handler starts. Without /proc (not Linux), return at once."""
    bit = 1 << (int(signum) - 1)
    while time.monotonic() < deadline:
        pending = False
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue  # gone, or no /proc
            masks = [line.split()[1] for line in status.splitlines() if line.startswith(("SigPnd:", "ShdPnd:"))]
            pending = pending or any(int(mask, 16) & bit for mask in masks)
        if not pending:
            return
        time.sleep(0.01)


def handles(pid: int, signum: int) -> bool:
    """Whether process ``pid`` catches or ignores ``signum`` (/proc's SigCgt and SigIgn masks), so
    sending it cannot kill the process; False when it is gone. Without /proc (not Linux): True."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return not Path("/proc/self/status").exists()
    except OSError:
        return False
    bit = 1 << (int(signum) - 1)
    masks = [line.split()[1] for line in status.splitlines() if line.startswith(("SigCgt:", "SigIgn:"))]
    return any(int(mask, 16) & bit for mask in masks)
