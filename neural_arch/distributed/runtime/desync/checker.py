"""The desync check's thread: publish fingerprints each beat, compare them on rank 0, act on a verdict.

Use: the heartbeat starts one per rank, ``Checker(rank, world_size, store, since, interval, stop)``
(``since``: ``recorder.last_record_ids()`` before the process group was made); setting ``stop``
ends it. Once rank 0 has named a desync, every rank prints the verdict (rank 0 and the named
ranks), ``verdict()`` returns it, and the main thread raises ``CollectiveDesync``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import threading
import time
from typing import Optional

import torch.distributed as dist

from neural_arch.distributed.runtime import call_count
from neural_arch.distributed.runtime.call_count import CollectiveFailed
from neural_arch.distributed.runtime.desync import dump, fingerprints, recorder
from neural_arch.distributed.runtime.desync.compare import Mismatch, explain, find_mismatch
from neural_arch.distributed.runtime.desync.records import Sites, Suspect, Verdict, fingerprints_key, sites_key

SITES_WAIT = 5.0
"""Seconds rank 0 waits for the other ranks' call sites before naming the desync without them."""
GRACE = 3.0
"""Seconds a named rank's main thread has to raise ``CollectiveDesync`` before the rank exits (it is
blocked in C++); the other ranks wait twice as long, by when the named ranks' exit has unblocked them."""
POLL = 0.1
"""Seconds between store checks once a desync is suspected."""

_verdict: Optional[str] = None  # this process's verdict, once known


class CollectiveDesync(CollectiveFailed):
    """The ranks entered different collectives; the message names the ranks and both call sites.

    Raised in the main thread of every rank by the checker thread (so it may appear at any line
    of the script), with the verdict as its message."""

    def __init__(self, message: Optional[str] = None) -> None:
        super().__init__(message or _verdict or "collective desync (see the other ranks' output)")


CollectiveDesync.__module__ = "neural_arch.distributed.runtime"  # tracebacks show the public name


def verdict() -> Optional[str]:
    """This process's desync verdict, if one was found."""
    return _verdict


def read_verdict(store: dist.Store) -> Optional[str]:
    """The job's desync verdict from the store, if rank 0 stored one."""
    found = Verdict.load(store)
    return None if found is None else found.line


def _sequence_numbers() -> Optional[tuple]:
    """Every process group's count of collectives so far (a cheap test for "anything new?"), or
    None where a group cannot tell (then every beat publishes)."""
    try:
        groups = list(dist.distributed_c10d._world.pg_names)
        return tuple(int(pg._get_sequence_number_for_group()) for pg in groups)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a backend without sequence numbers
        return None


def _raise_in_main_thread() -> None:
    """Have the main thread raise ``CollectiveDesync`` at its next Python instruction (it cannot
    while it waits inside a C++ collective)."""
    main = threading.main_thread().ident
    if main is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main), ctypes.py_object(CollectiveDesync))


class Checker:
    """One rank's desync check: publish fingerprints each beat; rank 0 compares; act on a verdict."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        store: dist.Store,
        since: recorder.Since,
        interval: float,
        stop: threading.Event,
    ) -> None:
        self.rank, self.world_size, self.store = rank, world_size, store
        self.since, self.interval, self.stop = dict(since), interval, stop
        self.wait = interval  # longer when the recorder is large: see _publish
        self.published: Optional[tuple] = None  # the groups' sequence numbers when last published
        self.mismatch: Optional[Mismatch] = None  # rank 0: what it suspects
        self.suspected_at = 0.0
        self.sites_sent = False
        self.comparisons = 0  # rank 0: beats on which every rank's fingerprints were compared
        self.compared: list = []  # rank 0: the records it compared last
        self.thread = threading.Thread(target=self._run, name=f"neural_arch-desync-{rank}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(POLL if self.sites_sent or self.mismatch else self.wait):
            try:
                if self.step():
                    return
            except Exception:  # noqa: BLE001 - the store or group is gone: the job is ending
                return

    def step(self) -> bool:
        """One beat; True once a verdict was acted on."""
        if not self.sites_sent:
            self._publish()
        if self.rank == 0 and self.mismatch is None:
            self._compare()
        suspect = Suspect.load(self.store)  # the one store round trip of a quiet beat
        if suspect is None:
            return False
        if not self.sites_sent:
            self._send_sites(suspect.dir)
        if self.rank == 0 and self.mismatch is not None and Verdict.load(self.store) is None:
            self._judge(suspect.dir)
        found = Verdict.load(self.store)
        if found is None:
            return False
        self._act(found)
        return True

    def _publish(self) -> None:
        """This rank's newest fingerprints, when it entered a collective since the last beat."""
        now = _sequence_numbers()
        if now is not None and now == self.published:  # nothing new (a blocked rank, for one): no dump, no store write
            return
        start = time.perf_counter()
        blob = fingerprints.encode(fingerprints.recent(self.since))
        # Why: the dump's cost grows with the recorder's size (TORCH_FR_BUFFER_SIZE, which a job may
        # set to thousands); spend at most ~1% of one core on it, beating less often if need be.
        self.wait = max(self.interval, 100 * (time.perf_counter() - start))
        self.store.set(fingerprints_key(self.rank), blob)
        self.published = now

    def _compare(self) -> None:
        """Rank 0: compare every rank's newest fingerprints; store a suspicion at the first difference."""
        keys = [fingerprints_key(r) for r in range(self.world_size)]
        if not self.store.check(keys):  # a rank has not published yet
            return
        blobs = self.store.multi_get(keys)
        if blobs == self.compared:  # nobody entered a collective since the last comparison
            return
        self.compared = blobs
        found = find_mismatch({r: fingerprints.decode(blob) for r, blob in enumerate(blobs)})
        self.comparisons += 1
        if found is None:
            return
        self.mismatch, self.suspected_at = found, time.monotonic()
        name = f"neural_arch-fr-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        Suspect(found.pg, found.seq, os.path.join(tempfile.gettempdir(), name)).save(self.store)

    def _send_sites(self, directory: str) -> None:
        """Write this rank's dump and publish its entries with call sites (once)."""
        self.sites_sent = True
        taken = recorder.dumps(stacks=True)
        dump.write_dump(directory, self.rank, taken)
        count, current = call_count.progress()
        Sites([e.encode() for e in fingerprints.with_sites(taken, self.since)], count, current).save(
            self.store, self.rank
        )

    def _judge(self, directory: str) -> None:
        """Rank 0: word the verdict once every rank sent its call sites (or ``SITES_WAIT`` passed)."""
        assert self.mismatch is not None
        ready = [r for r in range(self.world_size) if self.store.check([sites_key(r)])]
        if len(ready) < self.world_size and time.monotonic() - self.suspected_at < SITES_WAIT:
            return
        records = {r: Sites.load(self.store, r) for r in ready}
        sites = {r: rec.decoded() for r, rec in records.items()}
        calls = {r: (rec.calls, rec.current) for r, rec in records.items()}
        for r in self.mismatch.at:  # a rank that did not answer: its entry, without a call site
            sites.setdefault(r, [self.mismatch.at[r]])
        line, named = explain(self.mismatch, sites, time.time_ns(), dump.shown_directory(directory), calls)
        Verdict(line, named).save(self.store)

    def _act(self, found: Verdict) -> None:
        """Print the verdict, raise it in the main thread, and exit if that thread stays stuck."""
        global _verdict
        _verdict = found.line
        if self.rank == 0 or self.rank in found.named:  # not once per rank of a large job
            print(f"neural_arch: {found.line}", file=sys.stderr, flush=True)
        _raise_in_main_thread()
        # The named ranks go first: their exit unblocks the others' collectives, whose main threads
        # then raise CollectiveDesync with a traceback (and the launcher names the right root cause).
        if self.stop.wait(GRACE if self.rank in found.named else 2 * GRACE):  # the process is leaving the group
            return
        print(
            f"neural_arch: rank {self.rank} exits: its main thread is still inside a collective that cannot "
            "complete (the desync above)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)
