"""Name the rank that did not arrive when a collective times out.

Used automatically: ``init_process_group`` starts a heartbeat at world size > 1, and the
launcher's worker wrapper calls ``describe_stragglers()`` when a script dies of a
collective timeout. Call it yourself in an ``except`` block to get the same line.

Every rank's daemon thread writes ``(torch's collective count, wall time, the script's own
collective calls, its host, the call in progress)`` to the job's store once a second, and a
last record marked ``left`` when it stops. Reading them back has a deadline (``READ_DEADLINE``):
a rank cut off from the store's host by a partition names nobody, but still exits, so
that its launcher can restart the job once the link is back. A rank that sleeps, computes or skipped a call keeps
beating but its counts fall behind; a stopped (SIGSTOP) or dead rank stops beating. Gloo's
own timeout message ("Timed out waiting 10000ms for recv") names neither. The script's
calls (``call_count.py``) are what the message counts, e.g.
``rank 0 timed out in collective call #3 (all_reduce); did not arrive: rank 1 (entered only
2 collective calls; now in destroy_process_group)``; torch's count, which includes internal
collectives, is the fallback for raw ``torch.distributed`` calls.

Beside it runs the desync check (``desync/``): ranks that entered *different* collectives are
named within seconds, with both call sites, instead of at the timeout; once it has named them,
``describe_stragglers`` answers with that verdict.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist

from neural_arch.distributed.runtime import call_count, desync
from neural_arch.distributed.runtime.deadline import within

INTERVAL = 1.0
"""Seconds between heartbeats."""
LEFT = "left"
READ_DEADLINE = 5.0
"""Seconds at most to read every peer's record while diagnosing a failure."""
STOP_WAIT = 3.0
"""Seconds ``stop()`` waits for the thread: one stuck in a store write (partition) is left behind."""
"""The last record's state: this rank left the process group."""


def _key(rank: int) -> str:
    return f"neural_arch/heartbeat/{rank}"


def _sequence(group: dist.ProcessGroup) -> int:
    return int(group._get_sequence_number_for_group())


class Heartbeat:
    """A daemon thread writing this rank's progress to the store until ``stop()``."""

    def __init__(self, rank: int, interval: float, since: Optional[desync.Since] = None) -> None:
        self.group = dist.distributed_c10d._get_default_group()
        self.store = dist.distributed_c10d._get_default_store()
        self.rank, self.interval = rank, interval
        self.host = socket.gethostname()
        self._stop = threading.Event()
        # The first beat is written before init returns: a rank that stops or hangs right
        # after init must read as "silent", not "never reported", whatever the thread timing.
        self._write()
        self.thread = threading.Thread(target=self._beat, name=f"neural_arch-heartbeat-{rank}", daemon=True)
        self.thread.start()
        # The desync check: its own thread, so that its store round trips never delay a beat.
        self.checker: Optional[desync.Checker] = None
        if since is not None and desync.recorder_enabled():
            size = dist.get_world_size()
            self.checker = desync.Checker(rank, size, self.store, since, interval, self._stop)

    def _write(self, state: Optional[str] = None) -> None:
        count, current = call_count.progress()
        now = state or current or "-"
        self.store.set(_key(self.rank), f"{_sequence(self.group)} {time.time():.3f} {count} {self.host} {now}")

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._write()
            except Exception:  # noqa: BLE001 - the store is gone: the group is shutting down
                return
        try:
            self._write(LEFT)  # peers can tell "left" from "hangs" at once
        except Exception:  # noqa: BLE001 - same
            return

    def stop(self) -> None:
        """Stop and join the thread; must happen before the group is destroyed, because a
        thread still inside a store call at interpreter exit aborts the process. A thread
        stuck in a write to an unreachable store is not waited for beyond ``STOP_WAIT``: the
        process must exit (aborting is an exit; waiting for the link is a wedge)."""
        self._stop.set()
        deadline = time.monotonic() + STOP_WAIT  # for both threads together
        self.thread.join(timeout=STOP_WAIT)
        if self.checker is not None and self.checker.thread is not threading.current_thread():
            self.checker.thread.join(timeout=max(0.0, deadline - time.monotonic()))


# The running heartbeat of this process's default group: like the default group itself,
# there is at most one, and destroy_process_group must be able to stop it.
_running: list[Heartbeat] = []


def start_heartbeat(
    rank: int, world_size: int, interval: float = INTERVAL, since: Optional[desync.Since] = None
) -> Optional[Heartbeat]:
    """Start this rank's heartbeat for the default group (no-op at world size 1); with ``since``
    (``desync.last_record_ids()`` before the group was made) also the desync check."""
    stop_heartbeat()
    if world_size <= 1 or not dist.is_initialized():
        return None
    beat = Heartbeat(rank, interval, since)
    _running.append(beat)
    return beat


def stop_heartbeat() -> None:
    """Stop the heartbeat, if one runs (called by destroy_process_group)."""
    while _running:
        _running.pop().stop()


@dataclass(frozen=True)
class Beat:
    """A peer's last heartbeat record."""

    rank: int
    sequence: int
    """Torch's count of collectives (internal ones included)."""
    age: float
    """Seconds since it was written."""
    calls: int
    """The script's own collective calls (call_count.py)."""
    state: str
    """The call in progress, ``destroy_process_group``, ``left``, or ``-`` (between calls)."""
    host: str = "?"
    """The host name of the machine the rank runs on."""


def read_beats(deadline: float = READ_DEADLINE) -> dict[int, Optional[Beat]]:
    """Every other rank's last record (None: it never reported); raises if the store is gone,
    ``TimeoutError`` if it does not answer within ``deadline`` seconds."""
    store = dist.distributed_c10d._get_default_store()
    rank, size = dist.get_rank(), dist.get_world_size()
    return within(deadline, lambda: _read_all(store, rank, size), "reading the peers' heartbeats")


def _read_all(store: dist.Store, rank: int, size: int) -> dict[int, Optional[Beat]]:
    found: dict[int, Optional[Beat]] = {}
    now = time.time()
    for other in range(size):
        if other == rank:
            continue
        if not store.check([_key(other)]):
            found[other] = None
            continue
        seq, stamp, count, host, state = store.get(_key(other)).decode().split(maxsplit=4)
        found[other] = Beat(other, int(seq), max(0.0, now - float(stamp)), int(count), state, host)
    return found


def _where(beat: Beat, stale_after: float) -> str:
    if beat.state == LEFT:
        return f"left the process group {beat.age:.0f} s ago"
    if beat.age > stale_after:
        return f"silent for {beat.age:.0f} s: stopped or dead"
    return "between collectives" if beat.state == "-" else f"now in {beat.state}"


def describe_stragglers(stale_after: float = 3 * INTERVAL + 2, verb: str = "timed out") -> Optional[str]:
    """One line naming ranks behind this one or silent, or None if it cannot tell."""
    if not dist.is_initialized():
        return None
    if desync.verdict() is not None:  # the ranks entered different collectives: that explains it
        return desync.verdict()
    try:
        rank, mine = dist.get_rank(), _sequence(dist.distributed_c10d._get_default_group())
        count, current = call_count.progress()
        store, size = dist.distributed_c10d._get_default_store(), dist.get_world_size()
        beats, found = within(
            READ_DEADLINE,
            lambda: (_read_all(store, rank, size), desync.read_verdict(store)),
            "reading the peers' heartbeats",
        )
        if found is not None:  # rank 0 named a desync; a peer may have exited of it already
            return found
    except TimeoutError:  # cut off from the store's host: say so, and let the rank exit
        where = f"collective call #{count} ({current})" if current is not None else f"collective #{mine}"
        return (
            f"rank {rank} {verb} in {where}; the job's store did not answer within {READ_DEADLINE:g} s, "
            f"so this rank ({socket.gethostname()}) is probably cut off from the store's host"
        )
    except Exception:  # noqa: BLE001 - diagnosis is best effort; never mask the real error
        return None
    missing = []
    for other, beat in beats.items():
        if beat is None:
            missing.append(f"rank {other} (never reported)")
        elif current is not None and beat.calls < count:
            missing.append(
                f"rank {other} (entered only {beat.calls} collective calls; {_where(beat, stale_after)}) on {beat.host}"
            )
        elif beat.state == LEFT or beat.age > stale_after:
            missing.append(f"rank {other} ({_where(beat, stale_after)}) on {beat.host}")
        elif beat.sequence < mine:
            missing.append(
                f"rank {other} (entered only {beat.sequence} collectives, internal ones included) on {beat.host}"
            )
    if not missing:
        return None
    where = f"collective call #{count} ({current})" if current is not None else f"collective #{mine}"
    return f"rank {rank} {verb} in {where}; did not arrive: " + ", ".join(missing)


def describe_peers() -> str:
    """``rank 0: 3 calls, now in all_reduce`` for every other rank (best effort)."""
    try:
        beats = read_beats()
    except Exception:  # noqa: BLE001 - best effort
        return "their state is unreadable"
    return "; ".join(
        f"rank {r}: never reported" if b is None else f"rank {r}: {b.calls} calls, {_where(b, 1e9)}"
        for r, b in beats.items()
    )


def peers_stopped(wait: float = 1.5 * INTERVAL) -> Optional[list[int]]:
    """Ranks whose heartbeat has stopped (left, or no new beat within ``wait`` seconds);
    None if the store cannot be read (then nobody can tell)."""
    try:
        before = read_beats()
        time.sleep(wait)
        after = read_beats()
    except Exception:  # noqa: BLE001 - the store went away with its host
        return None
    return [
        r
        for r, b in after.items()
        if b is None or b.state == LEFT or (before[r] is not None and b.age >= before[r].age + wait * 0.9)
    ]


def explain_failed_teardown() -> str:
    """The hint for a failed barrier at teardown: a peer that exited early only when its
    heartbeat has really stopped; otherwise which call the live peers are still in."""
    stopped = peers_stopped()
    if stopped is None:
        return "the job's store is unreachable, so its host (rank 0 or the launcher) probably exited early"
    if stopped:
        return f"rank(s) {', '.join(map(str, stopped))} stopped beating: a peer probably exited early or was killed"
    count, _ = call_count.progress()
    return (
        f"no peer exited: they still beat ({describe_peers()}; this rank: {count} calls), so the ranks called "
        "different collectives (one skipped or added a call) or a peer is slower than the timeout"
    )
