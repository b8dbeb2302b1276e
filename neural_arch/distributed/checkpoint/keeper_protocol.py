"""The wire format between a worker and a snapshot keeper (memory_keeper.py), and the worker's client.

Use (a worker; ``address`` names the keeper its launcher agent runs)::

    client = KeeperClient(KeeperAddress("127.0.0.1", port, token))
    client.put(step=6, part=0, parts=1, chunks=stream)   # stream: an iterable of bytes
    step = client.newest()                               # the newest complete step, or None
    held = client.held()                                 # HeldStep(step, parts, held): which parts it has
    data = client.get(step, part=0)                      # that part's bytes
    fd = client.open(step, part=0)                       # or the keeper's own file of them (same host)

Every connection carries one request. It opens with the job-token handshake of
``launcher/job_token.py`` (the keeper challenges, the worker proves the token; the token never
crosses the wire), then the worker sends one JSON line (``{"op": "put"|"get"|"newest", ...}``);
a ``put`` follows it with frames (8-byte big-endian length, then that many bytes; length 0
ends), so neither side needs the snapshot's size before it is serialized. The keeper answers
one JSON line (``{"error": "..."}`` on refusal). A ``put`` may name the parts this keeper is to
hold of the step (``holds``: a node's keeper in a multi-node job holds its own ranks' parts and
the previous node's, ``training/snapshot_ring.py``; default every part), and a ``newest``
answers which parts it holds of its complete step (``parts``, ``held``). A ``get``'s answer ``{"step": S, "size": n}``
is followed by the ``n`` bytes. An ``open``'s answer names the keeper's file of the part
(``keeper_blob.py``: pid, descriptor, device, inode, size); the worker opens it and answers one
line, and until then the keeper holds that descriptor open for it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional

from neural_arch.distributed.checkpoint.keeper_blob import open_identified
from neural_arch.distributed.launcher.job_token import HANDSHAKE_SECONDS, ForeignJobError, JobToken, respond

CHUNK = 4 << 20
"""Bytes per frame a worker sends (and per receive the keeper makes): a bounded buffer on both sides."""
LINE_LIMIT = 64 << 10
"""A request or answer line longer than this is refused (a peer never makes the keeper hold more)."""
IO_SECONDS = 60.0
"""How long either side waits for the other's next bytes before giving up on the connection."""
FRAME = struct.Struct(">Q")


class KeeperError(RuntimeError):
    """The keeper refused a request or could not be reached; the message says which and why."""


@dataclass(frozen=True)
class KeeperAddress:
    """Where a worker finds its node's keeper, and the token that proves it belongs to the job."""

    host: str
    port: int
    token: JobToken
    reach: Optional[str] = None
    """The address every node reaches this keeper at (a multi-node job's, then also ``host``;
    None: a keeper on loopback, for this node's workers only)."""

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def local_only(self) -> bool:
        """Whether only this node's workers can reach it (on loopback: no ``reach``)."""
        return self.reach is None


@dataclass(frozen=True)
class HeldStep:
    """What a keeper holds complete: ``step``, pushed in ``parts`` parts, of which it holds ``held``."""

    step: int
    parts: int
    held: tuple[int, ...]

    def has(self, step: int, part: int, parts: int) -> bool:
        """Whether it holds ``part`` of ``step`` as pushed in ``parts`` parts (a step of the same
        number from another world size is another snapshot)."""
        return (self.step, self.parts) == (step, parts) and part in self.held


def send_line(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def read_line(sock: socket.socket) -> dict[str, Any]:
    """One JSON line (byte by byte up to the newline: nothing after it is consumed)."""
    data = bytearray()
    while not data.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            raise KeeperError("the connection closed before a whole line arrived")
        data += byte
        if len(data) > LINE_LIMIT:
            raise KeeperError(f"a line longer than {LINE_LIMIT} bytes")
    message = json.loads(data)
    if not isinstance(message, dict):
        raise KeeperError("a line that is not a JSON object")
    return message


def read_exact(sock: socket.socket, size: int) -> bytearray:
    """Exactly ``size`` bytes (KeeperError if the peer closes first), in the buffer they were read into."""
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:], min(size - got, CHUNK))
        if n == 0:
            raise KeeperError(f"the connection closed after {got} of {size} bytes")
        got += n
    return buffer


def send_frames(sock: socket.socket, chunks: Iterable[bytes]) -> int:
    """Send ``chunks`` as frames, then the end frame; the bytes sent."""
    total = 0
    for chunk in chunks:
        if chunk:
            sock.sendall(FRAME.pack(len(chunk)))
            sock.sendall(chunk)
            total += len(chunk)
    sock.sendall(FRAME.pack(0))
    return total


def read_frames(sock: socket.socket) -> Iterator[bytes]:
    """The frames' contents until the end frame; a frame over ``CHUNK`` bytes is refused."""
    while True:
        (size,) = FRAME.unpack(read_exact(sock, FRAME.size))
        if size == 0:
            return
        if size > CHUNK:
            raise KeeperError(f"a frame of {size} bytes (at most {CHUNK})")
        yield bytes(read_exact(sock, size))  # a frame the keeper holds: immutable


class KeeperClient:
    """A worker's requests to its keeper; each opens a connection, proves the token, asks once."""

    def __init__(self, address: KeeperAddress) -> None:
        self.address = address

    def put(
        self, step: int, part: int, parts: int, chunks: Iterable[bytes], holds: Optional[Iterable[int]] = None
    ) -> int:
        """Give the keeper ``part`` of ``parts`` of step ``step`` (of which it is to hold the parts
        ``holds``, default all); the bytes sent. KeeperError if refused."""
        request: dict[str, Any] = {"op": "put", "step": step, "part": part, "parts": parts}
        if holds is not None:
            request["holds"] = sorted(holds)
        with self._connect() as sock:
            send_line(sock, request)
            sent = send_frames(sock, chunks)
            self._answer(sock)
        return sent

    def newest(self) -> Optional[int]:
        """The newest step the keeper holds complete (every part it is to hold), or None."""
        held = self.held()
        return None if held is None else held.step

    def held(self) -> Optional[HeldStep]:
        """The newest step the keeper holds complete and which parts of it, or None."""
        with self._connect() as sock:
            send_line(sock, {"op": "newest"})
            answer = self._answer(sock)
        if answer.get("step") is None:
            return None
        held = tuple(int(part) for part in answer.get("held", [0]))
        return HeldStep(int(answer["step"]), int(answer.get("parts", len(held))), held)

    def get(self, step: int, part: int) -> bytearray:
        """Part ``part`` of step ``step`` (KeeperError if the keeper does not hold it complete)."""
        with self._connect() as sock:
            send_line(sock, {"op": "get", "step": step, "part": part})
            answer = self._answer(sock)
            return read_exact(sock, int(answer["size"]))

    def open(self, step: int, part: int) -> int:
        """A read-only descriptor of the keeper's own file of part ``part`` of step ``step`` (the
        caller closes it); KeeperError if refused, or if that file cannot be opened from here
        (another host, no /proc): ``get`` then brings the bytes instead."""
        with self._connect() as sock:
            send_line(sock, {"op": "open", "step": step, "part": part})
            answer = self._answer(sock)
            fd, why = None, ""
            try:
                fd = open_identified(answer)
            except (OSError, KeyError, TypeError, ValueError) as exc:
                why = str(exc)
            with contextlib.suppress(OSError):  # a keeper that went away has let its descriptor go anyway
                send_line(sock, {"opened": fd is not None})
        if fd is None:
            raise KeeperError(f"cannot open the snapshot keeper's file of step {step} part {part}: {why}")
        return fd

    def _connect(self) -> socket.socket:
        where = self.address.where
        try:
            sock = socket.create_connection((self.address.host, self.address.port), timeout=HANDSHAKE_SECONDS)
        except OSError as exc:
            raise KeeperError(f"cannot reach the snapshot keeper at {where}: {exc.strerror or exc}") from None
        try:
            respond(sock, self.address.token, where)
        except ForeignJobError:  # another job's keeper (or no keeper of ours) on that port
            sock.close()
            raise KeeperError(f"the snapshot keeper at {where} belongs to another job (its token differs)") from None
        except Exception:
            sock.close()
            raise
        sock.settimeout(IO_SECONDS)
        return sock

    def _answer(self, sock: socket.socket) -> dict[str, Any]:
        answer = read_line(sock)
        if "error" in answer:
            raise KeeperError(f"the snapshot keeper at {self.address.where} refused: {answer['error']}")
        return answer
