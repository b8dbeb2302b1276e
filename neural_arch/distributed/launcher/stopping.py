"""How the agent stops a worker group: stacks first, stopped workers woken, crashed groups killed at once.

Used by the agent (``agent.py``): ``waking_first`` wraps torch's close of each attempt's
workers, ``live_members`` tells whether a worker's process group still has a live process
(after torch's stop, leftovers such as data loader workers are SIGKILLed until none is).
Test: ``.venv/bin/python -m pytest tests/distributed/launcher/test_wake.py``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Optional

from neural_arch.distributed.launcher.stacks import (
    STACKS_SIGNAL,
    await_delivery,
    await_written,
    handles,
    signal_main_thread,
)

__all__ = ["KILL_WAIT", "live_members", "stat_fields", "waking_first"]

STACKS_WAIT = 0.2
"""Seconds the workers get to write their stacks once the signal is delivered (a dump takes
milliseconds); after a crash, at most this long, until they stop writing."""
KILL_WAIT = 10
"""Seconds at most to wait for SIGKILLed workers to exit (a process in uninterruptible sleep may not)."""
STACKS_DELIVERY = 3.0
"""Seconds at most to wait for the stack signal to be delivered (a woken worker on a busy machine
may take a moment to run again; one that never does is stopped anyway)."""


def stat_fields(stat: Path) -> Optional[list[str]]:
    """The fields of a /proc/PID/stat after the command name: state, ppid, pgrp, ...; None
    when the process is gone (or this is not Linux)."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def waking_first(
    close: Callable[..., None],
    pids: Callable[[], dict[int, int]],
    crashed: Callable[[], bool],
    listening: Callable[[int, int], bool] = lambda local_rank, pid: False,
    failed: Callable[[], bool] = lambda: False,
) -> Callable[..., None]:
    """``close`` (torch's: SIGTERM the workers, wait up to 30 s, SIGKILL) preceded by a SIGCONT to
    every worker's process group. A stopped (SIGSTOP, ^Z) worker cannot act on SIGTERM, so a
    job with a stopped rank would take 30 s longer to report a failure (or to restart). torch
    calls close from inside its poll as soon as one worker has failed; waking the others there,
    not before the poll, leaves no moment in which a worker can fail unseen (a check for an
    exited worker before each poll would miss one that exits between the check and the poll).

    That close (no arguments) after a ``crashed()`` worker kills the others at once once their
    stacks are written: they are stuck in collectives with the dead rank or about to fail on
    them, and a SIGTERM's grace period would only delay the restart. A close with arguments (a
    stop, a membership change) and one after a worker stopped on request keep the grace period,
    in which ranks finish a checkpoint.

    ``listening(local_rank, pid)``: whether that worker said it writes its stacks on
    ``STACKS_SIGNAL`` (agent.py asks the launcher's channel); no other worker is sent it.
    ``failed()``: whether a worker has failed (as ``crashed``, without recording anything)."""

    def wake_then_close(*args: Any, **kwargs: Any) -> None:
        ranks = pids()
        workers = list(ranks.values())
        # Evidence first: every worker still alive writes its threads' stacks into its rank log
        # (worker.py), so the summary shows where a hung rank was, even inside DDP's own
        # collectives. Asked before the wake-up: a stopped worker writes them as it resumes,
        # before its own code runs on (and fails on the peers' closed connections).
        asked = []
        for local_rank, pid in ranks.items():
            if not listening(local_rank, pid) or not handles(pid, STACKS_SIGNAL):
                continue  # not ours to ask (an executable, an exec'd script): the signal would kill it
            try:
                signal_main_thread(pid, STACKS_SIGNAL)  # the script's thread writes them, still where it was
                asked.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in workers:  # workers lead their own process groups
            try:
                os.killpg(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        if asked:
            await_delivery(asked, STACKS_SIGNAL, time.monotonic() + STACKS_DELIVERY)
            if not args and not kwargs and failed():
                # A rank died: the others' stacks are collateral evidence, and every 0.1 s is a
                # restart's; go on once they have stopped writing (a dump takes milliseconds).
                await_written(asked, time.monotonic() + STACKS_WAIT)
            else:  # a hang: the stacks are the evidence, give them the whole wait
                time.sleep(STACKS_WAIT)
        if not args and not kwargs and crashed():
            # SIGKILL, then wait for the exits (milliseconds; bounded for a worker stuck in the
            # kernel), so they are recorded with the failure.
            args = (signal.SIGKILL, KILL_WAIT)
        close(*args, **kwargs)

    return wake_then_close


def live_members(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still running. Zombies do not count: they hold
    no ports or files, and an orphan's zombie lingers until init reaps it."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: fall back to "the group still exists"
        try:
            os.killpg(pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(entry / "stat")
        if fields and int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            return True
    return False
