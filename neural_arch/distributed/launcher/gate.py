"""A job's stores are reached only through a gate that checks the job token on each connection.

Use (rendezvous.py and agent.py do, when the job has a token)::

    store = serving_store(LOOPBACK, 0, timeout)                 # the store itself, loopback only
    gate = Gate("10.200.0.1", 29400, store.port, token)         # on the host: the job's public port
    local = Forwarder("10.200.0.1", 29400, token, deadline_s=600)  # on a joining node
    client = client_store(LOOPBACK, local.port, timeout)        # ForeignJobError above if refused

Why: a ``TCPStore`` has no authentication: whoever reaches its port reads and writes every
key, so a node without the token could take a rank. The gate owns the public port; on each
connection it runs the host's half of the token handshake (``job_token.challenge``) and only
then relays bytes to the store on loopback. A peer that fails is refused with one line on the
host's stderr naming its address, and never reaches the store. The forwarder, on a joining
node, is the other half: a loopback port for that node's own store clients (its agent, its
workers), each connection proven to the gate first. Bytes are relayed unchanged: the store's
protocol, timeouts and keys are torch's.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from typing import Callable, Optional

from neural_arch.distributed.launcher.job_token import HANDSHAKE_SECONDS, ForeignJobError, JobToken, challenge, respond
from neural_arch.distributed.launcher.listen import LOOPBACK, bind_listener

CHUNK = 1 << 16


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side ends, then close both (a store connection is
    one conversation: half of it is useless)."""

    def copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        for s in (a, b):  # wakes the other direction's recv
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    other = threading.Thread(target=copy, args=(b, a), daemon=True, name="neural_arch-relay")
    other.start()
    copy(a, b)
    other.join()
    a.close()
    b.close()


class _Acceptor:
    """A listening socket whose connections each go to ``serve`` in their own daemon thread."""

    def __init__(self, listener: socket.socket, serve: Callable[[socket.socket, tuple], None], name: str) -> None:
        self._listener, self._serve = listener, serve
        self.port: int = listener.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True, name=name)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, peer = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # e.g. EMFILE: try again rather than lose the job's port
                continue
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True, name="neural_arch-gate-conn").start()

    def close(self) -> None:
        """Stop accepting (connections already relayed end with their peers)."""
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()


class Gate(_Acceptor):
    """Listen on ``host:port`` (0: a free port, then ``.port``) and relay each connection that
    proves ``token`` to the store at ``127.0.0.1:store_port``; refuse the others in one line."""

    def __init__(self, host: str, port: int, store_port: int, token: JobToken) -> None:
        self._store_port, self._token = store_port, token
        self._refused: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        super().__init__(bind_listener(host, port), self._serve_one, f"neural_arch-gate-{port}")

    def _serve_one(self, conn: socket.socket, peer: tuple) -> None:
        conn.settimeout(HANDSHAKE_SECONDS)
        why_not = challenge(conn, self._token)
        if why_not is not None:
            self._report(peer[0], why_not)  # before the close: the refused node may be watching for it
            conn.close()
            return
        conn.settimeout(None)  # proven: from here on the store's own timeouts apply
        try:
            store = socket.create_connection((LOOPBACK, self._store_port), timeout=HANDSHAKE_SECONDS)
        except OSError:
            conn.close()
            return
        store.settimeout(None)
        _relay(conn, store)

    def _report(self, addr: str, why_not: str) -> None:
        # Once per address and reason: a refused TCPStore client retries its connection
        # every second until its own timeout, and one line says it all.
        with self._lock:
            if (addr, why_not) in self._refused:
                return
            self._refused.add((addr, why_not))
        print(
            f"launcher: refused a node at {addr} (port {self.port}): {why_not}; it gets no rank in this job. "
            "Start every node with the same --job-token, --job-token-file or NEURAL_ARCH_JOB_TOKEN.",
            file=sys.stderr,
            flush=True,
        )


class Forwarder(_Acceptor):
    """A loopback port on a joining node whose connections reach the gate at ``host:port``,
    each after proving ``token``. Construction proves it once (retrying a refused connection
    for up to ``deadline_s``, as a store client waits for its host): ``ForeignJobError`` at
    once when the host is of another job."""

    def __init__(self, host: str, port: int, token: JobToken, deadline_s: float) -> None:
        self._host, self._port, self._token = host, port, token
        self._where = f"{host}:{port}"
        self._open_proven(deadline_s).close()
        super().__init__(bind_listener(LOOPBACK, 0), self._serve_one, f"neural_arch-forward-{port}")

    def _open_proven(self, deadline_s: float) -> socket.socket:
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                sock = socket.create_connection((self._host, self._port), timeout=HANDSHAKE_SECONDS)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        try:
            respond(sock, self._token, self._where)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        return sock

    def _serve_one(self, conn: socket.socket, peer: tuple) -> None:
        try:
            upstream = self._open_proven(HANDSHAKE_SECONDS)
        except (OSError, ForeignJobError):
            conn.close()  # the client sees a closed connection and retries or fails on its own timeout
            return
        _relay(conn, upstream)


def forwarded(
    host: str, port: int, token: Optional[JobToken], deadline_s: float
) -> tuple[str, int, Optional[Forwarder]]:
    """Where a store client on this node connects to reach ``host:port``: through a new
    ``Forwarder`` when the job has a token, else directly."""
    if token is None:
        return host, port, None
    forwarder = Forwarder(host, port, token, deadline_s)
    return LOOPBACK, forwarder.port, forwarder
