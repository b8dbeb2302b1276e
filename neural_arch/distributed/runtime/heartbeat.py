"""Name the rank that did not arrive when a collective times out.

Used automatically: ``init_process_group`` starts a heartbeat at world size > 1, and the
launcher's worker wrapper calls ``describe_stragglers()`` when a script dies of a
collective timeout. Call it yourself in an ``except`` block to get the same line.

Every rank's daemon thread writes ``(collectives issued so far, wall time)`` to the job's
store once a second. A rank that sleeps or computes outside a collective keeps beating
but its count falls behind; a stopped (SIGSTOP) or dead rank stops beating. Gloo's own
timeout message ("Timed out waiting 10000ms for recv") names neither.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

import torch.distributed as dist

INTERVAL = 1.0
"""Seconds between heartbeats."""


def _key(rank: int) -> str:
    return f"neural_arch/heartbeat/{rank}"


def _sequence(group: dist.ProcessGroup) -> int:
    return int(group._get_sequence_number_for_group())


class Heartbeat:
    """A daemon thread writing this rank's progress to the store until ``stop()``."""

    def __init__(self, rank: int, interval: float) -> None:
        self.group = dist.distributed_c10d._get_default_group()
        self.store = dist.distributed_c10d._get_default_store()
        self.rank, self.interval = rank, interval
        self._stop = threading.Event()
        # The first beat is written before init returns: a rank that stops or hangs right
        # after init must read as "silent", not "never reported", whatever the thread timing.
        self._write()
        self.thread = threading.Thread(target=self._beat, name=f"neural_arch-heartbeat-{rank}", daemon=True)
        self.thread.start()

    def _write(self) -> None:
        self.store.set(_key(self.rank), f"{_sequence(self.group)} {time.time():.3f}")

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._write()
            except Exception:  # noqa: BLE001 - the store is gone: the group is shutting down
                return

    def stop(self) -> None:
        """Stop and join the thread; must happen before the group is destroyed, because a
        thread still inside a store call at interpreter exit aborts the process."""
        self._stop.set()
        self.thread.join(timeout=10)


# The running heartbeat of this process's default group: like the default group itself,
# there is at most one, and destroy_process_group must be able to stop it.
_running: list[Heartbeat] = []


def start_heartbeat(rank: int, world_size: int, interval: float = INTERVAL) -> Optional[Heartbeat]:
    """Start this rank's heartbeat for the default group (no-op at world size 1)."""
    stop_heartbeat()
    if world_size <= 1 or not dist.is_initialized():
        return None
    beat = Heartbeat(rank, interval)
    _running.append(beat)
    return beat


def stop_heartbeat() -> None:
    """Stop the heartbeat, if one runs (called by destroy_process_group)."""
    while _running:
        _running.pop().stop()


def describe_stragglers(stale_after: float = 3 * INTERVAL + 2) -> Optional[str]:
    """One line naming ranks behind this one or silent, or None if it cannot tell."""
    if not dist.is_initialized():
        return None
    try:
        group = dist.distributed_c10d._get_default_group()
        store = dist.distributed_c10d._get_default_store()
        rank, world, mine = dist.get_rank(), dist.get_world_size(), _sequence(group)
        now = time.time()
        behind, silent = [], []
        for other in range(world):
            if other == rank:
                continue
            if not store.check([_key(other)]):
                silent.append(f"rank {other} (never reported)")
                continue
            seq_text, stamp = store.get(_key(other)).decode().split()
            age = now - float(stamp)
            if age > stale_after:
                silent.append(f"rank {other} (silent for {age:.0f} s: stopped or dead)")
            elif int(seq_text) < mine:
                behind.append(f"rank {other} (entered only {seq_text} collectives)")
    except Exception:  # noqa: BLE001 - diagnosis is best effort; never mask the real error
        return None
    if not behind and not silent:
        return None
    return (
        f"rank {rank} timed out in collective #{mine}; did not arrive: " + ", ".join(behind + silent)
    )
