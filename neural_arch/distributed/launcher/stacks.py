"""Every thread's Python stack into a rank's log, when the launcher asks, before it stops a group.

Used by worker.py (``dump_stacks_on_request(log)`` at start-up) and agent.py (sends
``STACKS_SIGNAL`` to every worker that said it listens, before it stops a failed or hung
group). ``faulthandler`` writes from its C signal handler, so a worker blocked inside a C++
collective, or stopped (SIGSTOP: the signal is delivered as it is woken, before its own code
runs on), still writes where each of its threads is. The failure summary quotes the main
thread's innermost frames.

The script's signals are its own, as under torchrun: the signal is a real-time one, which no
convention gives a meaning (SIGUSR1/SIGUSR2 are the script's: a handler of its own ran on
every peer failure when it was SIGUSR2), and the agent sends it only to a worker that said,
through the launcher's channel (``channel.STACKS``), that it writes its stacks on it, and
that still catches it (``handles``: after an ``exec`` it would die of it).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import platform
import signal
import time
from pathlib import Path
from typing import Optional

from neural_arch.distributed.launcher.channel import STACKS, tell

STACKS_SIGNAL = getattr(signal, "SIGRTMAX", signal.SIGUSR2)
"""What the launcher sends a worker to have it write its threads' stacks into its rank log: the
last real-time signal (Linux; SIGUSR2 elsewhere), which a script does not use (and one that
``signal.Signals`` names, as torch's agent needs of a signal that ended a worker)."""


def dump_stacks_on_request(log: Optional[Path]) -> bool:
    """From now on ``STACKS_SIGNAL`` writes every thread's stack to ``log`` and the process goes
    on, and the launcher is told so (``channel.STACKS``); whether it was set up. Without a log,
    nothing: the launcher then never sends the signal. The log stays open (a descriptor the
    script's children do not inherit) until the process ends."""
    if log is None:
        return False
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    faulthandler.register(STACKS_SIGNAL, file=out, all_threads=True, chain=False)
    tell(STACKS, str(int(STACKS_SIGNAL)))
    return True


_TGKILL = {"x86_64": 234, "aarch64": 131}
"""Linux's tgkill syscall number per machine (not in Python's os module)."""


def signal_main_thread(pid: int, signum: int) -> None:
    """Send ``signum`` to the main thread of process ``pid`` (Linux's tgkill; its tid is the
    pid), not to the process: a process-directed signal may run its handler on any thread, and
    when the process was stopped its main thread then runs on while another thread writes the
    stacks (the main thread's stack was seen past the stop, inside the next forward). Where
    tgkill is not at hand, ``os.kill``. Raises ProcessLookupError / PermissionError as os.kill."""
    number = _TGKILL.get(platform.machine()) if os.uname().sysname == "Linux" else None
    if number is None:
        os.kill(pid, signum)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, pid, pid, int(signum)) != 0:
        err = ctypes.get_errno()
        raise (ProcessLookupError if err == 3 else PermissionError if err == 1 else OSError)(err, os.strerror(err))


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


QUIET_POLLS = 3
"""``await_written``: polls 10 ms apart in which no asked process wrote a byte: its dump is done."""


def await_written(pids: list[int], deadline: float) -> None:
    """Wait until no process of ``pids`` has written anything for ``QUIET_POLLS`` polls (its
    ``/proc/PID/io`` ``wchar``: a stack dump is written by the signal handler in one burst), or
    ``deadline``. Without /proc, until ``deadline``."""

    def written() -> dict[int, int]:
        counts = {}
        for pid in pids:
            try:
                text = Path(f"/proc/{pid}/io").read_text()
            except OSError:
                continue  # gone, or no /proc
            counts[pid] = next((int(line.split()[1]) for line in text.splitlines() if line.startswith("wchar:")), 0)
        return counts

    if not Path("/proc/self/io").exists():  # nothing to watch: the whole wait
        time.sleep(max(deadline - time.monotonic(), 0))
        return
    before, quiet = written(), 0
    while time.monotonic() < deadline:
        time.sleep(0.01)
        now = written()
        quiet = quiet + 1 if now == before else 0
        if quiet >= QUIET_POLLS:
            return
        before = now


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
