"""A node's keeper of the workers' training-state snapshots, in a process that outlives them.

Use (a launcher agent would; tests do)::

    with SnapshotKeeper(token, capacity=2 << 30) as keeper:   # listens on 127.0.0.1, a free port
        address = keeper.address                               # KeeperAddress for the workers
        ...                                                    # workers push and fetch (keeper_protocol.py)

Why here: a failure restarts every worker of the group (torch elastic), so a copy kept in a
worker's memory dies with it. The node's launcher agent survives its workers: it holds the copy
(Gemini-style: the host's CPU memory) and the restarted workers read it back instead of a file.

What it holds: per step, the parts it is to hold of ``parts`` (``training/snapshot_ring.py``: a
replicated state is one part, rank 0's; a sharded one, a part per rank). The newest step of which
all those arrived is *complete* and is what ``get`` serves; at most one other step is pending
(a push of another step, or of the same step in another shape, drops it: parts of an attempt
that died are never mixed in). A push at or below the complete step is refused (stale).

Bounded footprint: at most ``capacity`` bytes of snapshot data (complete + pending, counted as
frames arrive), so with ``capacity`` = 2 x one step's snapshot the newest step is kept while the
next arrives. A push that would exceed it is refused with the numbers (its frames are read and
dropped) and the complete step stays. Frames are at most ``keeper_protocol.CHUNK`` bytes.

Where the bytes live: each part in its own sealed memory file (``memfd``: shared memory, no
disk, charged to the keeper's process). A worker on this host asks ``open`` and reads the part
straight from that file (``/proc/<keeper>/fd/<n>``, checked by inode), so a restore neither
streams it through a socket nor holds a second copy: ``training/memory_snapshot.py`` maps it
(``torch.load(mmap=True)``), copies the weights into place, and the optimizer state stays a
copy-on-write view of it. The node therefore keeps the last part a worker opened until those
workers end (their next restart): the keeper counts those bytes against ``capacity`` too.
``get`` (the bytes over the connection) stays for a worker that cannot open the file.

Where it runs: the launcher starts one per node for the job's lifetime (``launcher/keeper.py``)
and leaves its address in each worker's folder (``keeper_file.py``); the trainer pushes to it
every ``checkpoint.memory_every`` steps. On several nodes it listens on the node's address
(``reach``; every request still proves the keeper's token, which only the job's workers learn),
where the next node's workers push their copies too, so a lost host leaves a copy of each part.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Optional

from neural_arch.distributed.checkpoint.keeper_blob import Blob
from neural_arch.distributed.checkpoint.keeper_protocol import (
    IO_SECONDS,
    KeeperAddress,
    KeeperError,
    read_frames,
    read_line,
    send_line,
)
from neural_arch.distributed.launcher.job_token import HANDSHAKE_SECONDS, JobToken, challenge
from neural_arch.distributed.launcher.listen import bind_listener

MAX_PARTS = 1 << 17
"""The most parts a step may have (one per rank): a larger count in a request is refused."""


@dataclass
class _Step:
    """One step's parts as they arrive (each in its own sealed memory file)."""

    parts: int
    expect: frozenset[int]
    """The parts this keeper holds of the step (all of them on one node)."""
    data: dict[int, Blob] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(blob.size for blob in self.data.values())

    @property
    def complete(self) -> bool:
        return set(self.data) == self.expect

    def close(self) -> None:
        """Give the parts' memory back (a worker that opened one keeps its own reference)."""
        for blob in self.data.values():
            blob.close()


class SnapshotKeeper:
    """A TCP server (threads) holding the newest complete step of snapshots, ``capacity`` bytes at most."""

    def __init__(
        self, token: JobToken, capacity: int, host: str = "127.0.0.1", port: int = 0, reach: Optional[str] = None
    ) -> None:
        """``reach``: this node's address, where every node's workers connect (a multi-node job):
        the keeper listens on it alone, never on every interface; else on ``host`` alone.
        OSError where ``reach`` is not an address of this machine."""
        self.token, self.capacity, self.reach = token, capacity, reach
        self._server = bind_listener(reach, port) if reach else socket.create_server((host, port))
        if reach and ipaddress.ip_address(self._server.getsockname()[0]).is_loopback:
            self.reach = None  # e.g. a host name that /etc/hosts maps to 127.0.1.1: this machine's alone
        self._lock = threading.Lock()
        self._complete: Optional[tuple[int, _Step]] = None
        self._pending: Optional[tuple[int, _Step]] = None
        self._incoming = 0
        """Bytes of pushes still arriving (counted against ``capacity`` until they end)."""
        self._opened: Optional[tuple[int, int]] = None
        """(step, bytes) of the step workers last opened: mapped by them until they end."""
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="snapshot-keeper", daemon=True)

    @property
    def address(self) -> KeeperAddress:
        host, port = self._server.getsockname()[:2]
        return KeeperAddress(host, port, self.token, self.reach)

    @property
    def newest(self) -> Optional[int]:
        """The newest complete step held, or None."""
        with self._lock:
            return None if self._complete is None else self._complete[0]

    @property
    def held_bytes(self) -> int:
        """Snapshot bytes held now (complete, pending and arriving)."""
        with self._lock:
            return self._held()

    def start(self) -> SnapshotKeeper:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone leaves it blocked)
        except OSError:
            pass
        self._server.close()
        self._thread.join(timeout=5)
        with self._lock:
            for held in (self._complete, self._pending):
                if held is not None:
                    held[1].close()
            self._complete = self._pending = None

    def __enter__(self) -> SnapshotKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._handle, args=(conn,), name="snapshot-keeper-conn", daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(HANDSHAKE_SECONDS)
            if challenge(conn, self.token) is not None:
                return  # not of this job: it learns nothing and gives nothing
            conn.settimeout(IO_SECONDS)
            try:
                request = read_line(conn)
                op = request.get("op")
                if op == "put":
                    parts = int(request["parts"])
                    if not 1 <= parts <= MAX_PARTS:
                        raise ValueError(f"parts={parts}")  # a hostile count: no set of that size is built
                    holds = frozenset(int(p) for p in request.get("holds", range(parts)))
                    self._put(conn, int(request["step"]), int(request["part"]), parts, holds)
                elif op == "newest":
                    send_line(conn, self._newest())
                elif op == "get":
                    self._get(conn, int(request["step"]), int(request["part"]))
                elif op == "open":
                    self._open(conn, int(request["step"]), int(request["part"]))
                else:
                    send_line(conn, {"error": f"unknown request {op!r}"})
            except (KeeperError, OSError, ValueError, KeyError, TypeError):
                return  # a broken or hostile request: drop the connection, keep what is held

    def _newest(self) -> dict[str, object]:
        with self._lock:
            if self._complete is None:
                return {"step": None}
            step, held = self._complete
            return {"step": step, "parts": held.parts, "held": sorted(held.expect)}

    def _put(self, conn: socket.socket, step: int, part: int, parts: int, holds: frozenset[int]) -> None:
        why = self._refusal(step, part, parts, holds)
        blob = Blob.new(f"neural_arch-snapshot-{step}-{part}")
        arrived = 0
        try:
            for frame in read_frames(conn):  # read to the end frame even when refused: the answer follows it
                if why is None:
                    why = self._reserve(len(frame), step, part)
                if why is None:
                    blob.write(frame)
                    arrived += len(frame)
            if why is None:
                blob.seal()
                why = self._store(step, part, (parts, holds), blob, arrived)
            else:
                self._release(arrived)
        except BaseException:
            self._release(arrived)
            blob.close()
            raise
        if why is not None:
            blob.close()
        send_line(conn, {"error": why} if why else {"ok": True, "step": step, "part": part})

    def _refusal(self, step: int, part: int, parts: int, holds: frozenset[int]) -> Optional[str]:
        if not 0 <= part < parts or any(not 0 <= p < parts for p in holds):
            return f"part {part} of {parts} (holds {sorted(holds)}): a part is 0 to parts - 1"
        if part not in holds:
            return f"part {part} is not among the parts {sorted(holds)} this keeper is to hold"
        with self._lock:
            if self._complete is not None and step <= self._complete[0]:
                return f"step {step} is not newer than the complete step {self._complete[0]} held"
        return None

    def _reserve(self, size: int, step: int, part: int) -> Optional[str]:
        with self._lock:
            replaced = self._pending[1].data.get(part) if self._pending and self._pending[0] == step else None
            if self._held() - (replaced.size if replaced else 0) + size > self.capacity:
                return (
                    f"step {step} part {part} does not fit: {self._held() + size} bytes would exceed the keeper's "
                    f"capacity of {self.capacity} bytes; the complete step stays"
                )
            self._incoming += size
        return None

    def _release(self, arrived: int) -> None:
        with self._lock:
            self._incoming -= arrived

    def _store(
        self, step: int, part: int, shape: tuple[int, frozenset[int]], blob: Blob, arrived: int
    ) -> Optional[str]:
        """Keep the arrived ``blob`` (its bytes move from arriving to held under one lock);
        ``shape``: (parts, the parts this keeper holds) of the step, as its push said."""
        parts, holds = shape
        with self._lock:
            self._incoming -= arrived
            if self._complete is not None and step <= self._complete[0]:
                return f"step {step} is not newer than the complete step {self._complete[0]} held"
            pending = self._pending
            if pending is None or pending[0] != step or (pending[1].parts, pending[1].expect) != (parts, holds):
                if pending is not None:  # another step's parts, or another shape's: an attempt that is over
                    pending[1].close()
                self._pending = (step, _Step(parts, holds))
            assert self._pending is not None
            pending_step = self._pending[1]
            if part in pending_step.data:
                pending_step.data[part].close()
            pending_step.data[part] = blob
            if pending_step.complete:
                if self._complete is not None:
                    self._complete[1].close()
                self._complete, self._pending = self._pending, None
        return None

    def _get(self, conn: socket.socket, step: int, part: int) -> None:
        own = self._held_part(conn, step, part)  # its own descriptor: a newer step closing the keeper's is harmless
        if own is not None:
            with own:
                send_line(conn, {"step": step, "size": own.size})
                own.send(conn)

    def _open(self, conn: socket.socket, step: int, part: int) -> None:
        """Where a worker of this host opens the part itself: this process's descriptor of it,
        with the inode that proves the worker found that file and not one reusing the number."""
        own = self._held_part(conn, step, part)
        if own is None:
            return
        with self._lock:
            if self._complete is not None and self._complete[0] == step:
                self._opened = (step, self._complete[1].size)  # mapped by the workers until they end
        with own:  # held open until the worker has answered: the number cannot be reused meanwhile
            send_line(conn, {"step": step, "size": own.size, "pid": os.getpid(), **own.identity})
            read_line(conn)

    def _held_part(self, conn: socket.socket, step: int, part: int) -> Optional[Blob]:
        """A duplicate of the complete step's ``part`` (closed by the caller), or None once refused."""
        with self._lock:
            held = self._complete
            if held is not None and held[0] == step and part in held[1].data:
                return held[1].data[part].dup()
        send_line(conn, {"error": f"step {step} part {part} is not held complete (newest: {held and held[0]})"})
        return None

    def _held(self) -> int:
        steps = [s for s in (self._complete, self._pending) if s is not None]
        lingering = self._opened[1] if self._opened and all(self._opened[0] != s[0] for s in steps) else 0
        return sum(s[1].size for s in steps) + self._incoming + lingering
