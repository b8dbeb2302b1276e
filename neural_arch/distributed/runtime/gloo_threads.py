"""Keep gloo's socket thread from preempting the thread it waits for (Linux, CPU training).

Run (it is called for you after every process group and device mesh is made)::

    >>> import neural_arch.distributed as nd
    >>> nd.init_process_group()
    >>> nd.runtime.gloo_threads.batch_gloo_io_threads()  # gloo I/O threads now SCHED_BATCH
    1

Why: each gloo process group has one I/O thread (``gloo_tcp_loop``) that waits in
``epoll_wait`` for its sockets. When data arrives it wakes and, as a normal thread, at once
preempts whatever runs on its core, often gloo's own worker thread in the middle of a send
while holding the connection's lock. The I/O thread only ``try_lock``s that lock and, failing,
polls again: it spins until the scheduler's next tick (4 ms at HZ=250) lets the lock
holder finish. With one core per rank that happens on most of a small model's all-reduces,
which then take several times as long as their data needs (benchmarks/sea_ice_scaling/ has
the measurement). ``SCHED_BATCH`` has the same CPU share as a normal thread
(same nice value) but its wake-ups never preempt a running thread, so the lock holder
finishes first and the I/O thread then finds the lock free.

Nothing changes numerically; on other systems, or where the scheduler refuses, this does nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

IO_THREAD = "gloo_tcp_loop"
"""The name gloo gives its I/O thread (torch 2.13's gloo)."""


def batch_gloo_io_threads() -> int:
    """Put every gloo I/O thread of this process under ``SCHED_BATCH``; returns how many are
    now (threads already there count). Safe to call again: new groups bring new threads."""
    if not hasattr(os, "sched_setscheduler") or not hasattr(os, "SCHED_BATCH"):
        return 0
    try:
        tids = io_thread_ids()
    except OSError:  # no /proc, or a hardened one: keep torch's default
        return 0
    done = 0
    for tid in tids:
        try:
            if os.sched_getscheduler(tid) != os.SCHED_BATCH:
                os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
            done += 1
        except OSError:  # the thread ended meanwhile, or a policy forbids it: keep torch's default
            continue
    return done


def io_thread_ids() -> list[int]:
    """Thread ids of this process's gloo I/O threads (Linux ``/proc``)."""
    ids = []
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == IO_THREAD:
                ids.append(int(task.name))
        except OSError:  # the thread ended while we listed it
            continue
    return ids
