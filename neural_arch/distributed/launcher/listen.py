"""The job's TCP stores listen on one chosen address, never on all interfaces.

Use (the launcher and its agent do)::

    store = serving_store("127.0.0.1", 0, timeout=timedelta(seconds=60))  # host a store on loopback
    store = rendezvous_store("node0", 29400, timeout=..., is_host=None)   # host it, or join the host's

Why: torch's ``TCPStore`` server binds every interface (``*:PORT``) whatever ``host_name``
says, and a store is unauthenticated: anyone who reaches the port can read and write the
job's keys. ``TCPStore`` also accepts ``master_listen_fd``, a socket the caller has
already bound and is listening on (libuv and the classic backend both take it; the store
owns and closes it). So we bind the socket ourselves, to the address ``host`` names:
127.0.0.1 for a one-node job, the interface that serves ``--master_addr`` for many nodes.
"""

from __future__ import annotations

import errno
import socket
import sys
from datetime import timedelta
from typing import Optional

import torch.distributed as dist
from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

LOOPBACK = "127.0.0.1"
BACKLOG = 2048
"""Pending connections the listening socket queues: every worker of a big job connects at once."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``'s address (not the wildcard) and listening on ``port``
    (0: a free port); raises ``OSError`` (e.g. EADDRINUSE, EADDRNOTAVAIL) as ``bind`` does."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As TCPStore's own listener: a restarted job may reuse a port still in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def _listener_or_wildcard(host: str, port: int) -> Optional[socket.socket]:
    """``bind_listener(host, port)``; None (torch then binds all interfaces, with a note) when
    ``host`` is not an address of this machine, e.g. a DNS alias that points elsewhere."""
    try:
        return bind_listener(host, port)
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            raise
    print(
        f"launcher: note: {host} is not an address of this machine, so the store on port {port or '(free)'} "
        "listens on all interfaces; pass --master-addr/--local-addr naming this machine to avoid that.",
        file=sys.stderr,
        flush=True,
    )
    return None


def serving_store(host: str, port: int, timeout: timedelta) -> dist.TCPStore:
    """Host a ``TCPStore`` listening on ``host``'s address only; clients reach it at ``host:store.port``."""
    listener = _listener_or_wildcard(host, port)
    fd = listener.detach() if listener is not None else None  # the store owns the fd from here on
    return dist.TCPStore(
        host, port, None, True, timeout, wait_for_workers=False, multi_tenant=True, master_listen_fd=fd
    )


def client_store(host: str, port: int, timeout: timedelta) -> dist.TCPStore:
    """Connect to the ``TCPStore`` another process hosts at ``host:port``."""
    return dist.TCPStore(host, port, None, False, timeout, multi_tenant=True)


def rendezvous_store(host: str, port: int, timeout: timedelta, is_host: Optional[bool]) -> dist.TCPStore:
    """The c10d rendezvous store at ``host:port``: hosted here when ``host`` is this machine and
    the port is still free, else joined (torch's rule, ``_create_tcp_store``, with our listener).
    ``is_host`` (rdzv_conf) overrides the guess, as in torch."""
    if is_host is None and _matches_machine_hostname(host):
        try:
            return serving_store(host, port, timeout)
        except OSError as exc:
            # Another agent of this job on the same machine got the port first: join it.
            if exc.errno != errno.EADDRINUSE:
                raise
    elif is_host:
        return serving_store(host, port, timeout)
    return client_store(host, port, timeout)


def hosts_here(host: str, is_host: Optional[bool]) -> bool:
    """Whether this node hosts the c10d rendezvous store at ``host``: ``is_host`` (rdzv_conf) when
    given, else whether ``host`` names this machine (torch's rule)."""
    if is_host is not None:
        return bool(is_host)
    try:
        return _matches_machine_hostname(host)
    except OSError:  # this machine's own name does not resolve: ``host`` cannot be matched by it
        return False


def loopback_interface() -> Optional[str]:
    """The name of this machine's loopback interface (``lo`` on Linux, ``lo0`` on macOS), if found."""
    try:
        names = {name for _, name in socket.if_nameindex()}
    except OSError:
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)


def is_local(addr: str) -> bool:
    """Whether ``addr`` names this machine (loopback, or the address its hostname resolves to)."""
    if addr in ("localhost", "0.0.0.0") or addr.startswith("127."):
        return True
    try:
        return socket.gethostbyname(addr) in ("127.0.0.1", socket.gethostbyname(socket.gethostname()))
    except OSError:
        return False


def check_port_free(addr: str, port: int) -> None:
    """Fail at once, with a clear message, if another process listens on ``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "in use"
        try:
            probe.bind(("", port))
        except OSError:
            raise RuntimeError(
                f"master port {port} on {addr} is already in use (another job?); pass another "
                "--master_port, or omit it on a single node to use a free port."
            ) from None
