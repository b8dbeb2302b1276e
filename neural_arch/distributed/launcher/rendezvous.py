"""torch elastic's rendezvous handlers, with stores that listen on one address and a job check.

Use (``DistributedLauncher`` does): ``handler = rendezvous_handler(rendezvous_parameters(config,
run_id), token)`` in place of torch's ``get_rendezvous_handler(params)``: the parameters are a
c10d or static rendezvous (one node: on a free loopback port), ``token`` the job token nodes
must share (None: one node, or no token to check).

What differs from torch's own handlers, and why:
- The rendezvous store and, for c10d, the agent store that rank 0's agent hosts for the
  workers listen on the address their host name resolves to (``listen.py``), not on
  every interface.
- With a job token, every store sits on loopback behind a gate (``gate.py``) that lets a
  connection through only after it proved the token: the host refuses a node without it
  before that node can read or write a rendezvous key, so it never gets a rank.
- A c10d node whose keep-alive stopped (its host vanished) is named by the other launchers
  within torch's keep-alive expiry, not after ``training.timeout``, and an elastic group
  re-forms without it at once (``lost_nodes.py``).
- ``quiet_store_warnings()``: while a job runs, the launcher's C++ store warnings (a lost
  c10d host prints two ``TCPStore.cpp`` warnings with 30 C++ frames each) stay off unless
  ``--verbose``; the launcher says what happened in one line (``launch.lost_rendezvous_line``).
"""

from __future__ import annotations

import ctypes
import errno
import os
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Union

import torch
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousParameters
from torch.distributed.elastic.rendezvous.api import RendezvousInfo, RendezvousStoreInfo
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from neural_arch.distributed.launcher.gate import Forwarder, Gate, forwarded
from neural_arch.distributed.launcher.job_token import ForeignJobError, JobToken
from neural_arch.distributed.launcher.listen import LOOPBACK, client_store, hosts_here, serving_store
from neural_arch.distributed.launcher.lost_nodes import watch_lost_nodes

if TYPE_CHECKING:
    from neural_arch.distributed.launcher.config import LaunchConfig

DEFAULT_PORT = 29400
NPROC_KEY = "neural_arch_nproc_per_node"
"""The rendezvous parameter carrying this node's worker count (not a torch setting)."""


class RendezvousUnreachable(RuntimeError):
    """No store answers at the rendezvous endpoint: the launcher prints it as one line and exits 1."""


C10D_READ_TIMEOUT = 600
"""Seconds a c10d rendezvous store operation may wait (``--rdzv_conf read_timeout=``): torchrun's
60 s ends a job whose network to node 0 is cut for a minute, while the static rendezvous
waits ``--start_timeout`` (600 s) for the same; both now ride out a cut of up to 10 minutes."""

AGENT_STORE_TIMEOUT = timedelta(seconds=300)
"""torch's default for the agent store it would have created itself."""


def rendezvous_parameters(c: LaunchConfig, run_id: str) -> RendezvousParameters:
    """Where and how the nodes of ``c`` meet: torch elastic's parameters for ``rendezvous_handler``."""
    # One node: the agent store the workers meet at is on loopback (torch: this host's FQDN).
    local_addr = c.local_addr or (LOOPBACK if c.max_nodes == 1 else None)
    extra: dict[str, Any] = {"local_addr": local_addr, **c.rdzv_conf}
    one_node = c.max_nodes == 1 and not c.master_port  # None or 0; torchrun: a free port too (its c10d on localhost:0)
    # Port 0: the OS picks a free port atomically, so concurrent jobs never collide.
    endpoint = f"{LOOPBACK}:0" if one_node else f"{c.master_addr}:{c.master_port}"
    if c.c10d:  # nodes meet; node ranks are assigned
        settings = {"join_timeout": c.start_timeout, **({} if one_node else {"last_call_timeout": 2}), **extra}
        settings[NPROC_KEY] = c.nproc  # for the lost-node line's ranks (lost_nodes.py); torch ignores it
        return RendezvousParameters("c10d", endpoint, run_id, c.min_nodes, c.max_nodes, **settings)
    # One node meets nobody: a static store, on a free port unless one is given. torch's c10d rendezvous
    # would first sleep a random 0-0.3 s (to spread many nodes' joins), on every job's way to its first step.
    settings = {"rank": 0 if one_node else c.node_rank, "timeout": c.start_timeout, **extra}
    return RendezvousParameters("static", endpoint, run_id, c.max_nodes, c.max_nodes, **settings)


def rendezvous_handler(params: RendezvousParameters, token: Optional[JobToken]) -> RendezvousHandler:
    """A handler for ``params`` (backend ``c10d`` or ``static``) whose stores listen on one address."""
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=DEFAULT_PORT)
    if params.backend == "static":
        return _static_handler(params, host, port, token)
    timeout = timedelta(seconds=params.get_as_int("read_timeout", C10D_READ_TIMEOUT) or C10D_READ_TIMEOUT)
    hosting = hosts_here(host, params.get_as_bool("is_host"))
    reached = _store(host, port, timeout, token, hosting, float(params.get("join_timeout", 600) or 600))
    store = reached.store
    handler = create_handler(store, C10dRendezvousBackend(store, params.run_id), params)
    _closing_door(handler, reached.door)
    # Rank 0's agent hosts the workers' bootstrap store through this method; torch's version
    # listens on all interfaces. Replaced on the instance because torch's create_handler
    # always builds its own class. With a token it is on loopback: our agent gives the
    # workers a gated store of its own each attempt (agent.py), so nobody else needs it.
    handler._create_tcp_store_server = _loopback_agent_store if token else _agent_store  # type: ignore[method-assign]
    handler.next_rendezvous = _republishing(handler.next_rendezvous)  # type: ignore[method-assign]
    watch_lost_nodes(handler, int(params.get(NPROC_KEY, 1) or 1))
    return handler


def _republishing(next_rendezvous: Callable[[], RendezvousInfo]) -> Callable[[], RendezvousInfo]:
    """``next_rendezvous`` with node 0 publishing the bootstrap store's address in every round.

    torch 2.13 publishes it only in the round where node 0 first creates that store; a node
    joining a later round (``--nnodes=1:2``, mid-training) then waits for it until the
    rendezvous times out, while node 0 waits for the joiner's role info. Written again in
    each round's own key space, the joiner finds it.
    """

    def republished() -> RendezvousInfo:
        info = next_rendezvous()
        boot = info.bootstrap_store_info
        if info.rank == 0 and boot is not None:
            info.store.set(RendezvousStoreInfo.MASTER_ADDR_KEY, boot.master_addr.encode())
            info.store.set(RendezvousStoreInfo.MASTER_PORT_KEY, str(boot.master_port).encode())
        return info

    return republished


def _agent_store(addr: str, port: int) -> dist.TCPStore:
    return serving_store(addr, port, AGENT_STORE_TIMEOUT)


def _loopback_agent_store(addr: str, port: int) -> dist.TCPStore:
    return serving_store(LOOPBACK, 0, AGENT_STORE_TIMEOUT)


@dataclass
class _Reached:
    store: dist.TCPStore
    port: int
    """Where other nodes reach it (its gate's port, when it has one)."""
    door: Optional[Union[Gate, Forwarder]] = None


def _closing_door(handler: RendezvousHandler, door: Optional[Union[Gate, Forwarder]]) -> None:
    """The handler's ``shutdown()`` (the launcher's last call) also closes the store's gate or forwarder."""
    if door is None:
        return
    shutdown = handler.shutdown

    def closing() -> bool:
        door.close()
        return shutdown()

    handler.shutdown = closing  # type: ignore[method-assign]


def _store(
    host: str, port: int, timeout: timedelta, token: Optional[JobToken], hosting: bool, join_s: float
) -> _Reached:
    """The rendezvous store at ``host:port``: hosted here when ``hosting`` and the port is free
    (else joined, as torch's rule); with a token, on loopback behind a ``Gate`` on ``host:port``
    when hosted, through a ``Forwarder`` when joined (``ForeignJobError`` if the host refuses)."""
    if hosting:
        try:
            if token is None:
                store = serving_store(host, port, timeout)
                return _Reached(store, store.port)
            store = serving_store(LOOPBACK, 0, timeout)
            gate = Gate(host, port, store.port, token)
            return _Reached(store, gate.port, gate)
        except OSError as exc:
            # Another agent of this job on the same machine got the port first: join it.
            if exc.errno != errno.EADDRINUSE:
                raise
    try:
        addr, at, forwarder = forwarded(host, port, token, join_s)
        store = client_store(addr, at, timeout)
    except ForeignJobError:
        raise
    except (OSError, RuntimeError) as exc:  # torch's DistNetworkError/DistStoreError are RuntimeErrors
        raise RendezvousUnreachable(
            f"cannot reach the rendezvous store at {host}:{port} ({type(exc).__name__}: {_first_line(exc)}); "
            "check --rdzv-endpoint / --master-addr and --master-port, and that node 0's launcher runs."
        ) from None
    return _Reached(store, port, forwarder)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or ["no details"])[0][:200]


def _static_handler(params: RendezvousParameters, host: str, port: int, token: Optional[JobToken]) -> RendezvousHandler:
    rank, nodes = int(params.config["rank"]), params.max_nodes
    seconds = int(params.config.get("timeout", 600))
    timeout = timedelta(seconds=seconds)
    # Node 0 hosts, behind a gate with a token (a node that cannot prove it never gets a rank).
    # Unlike torch's StaticTCPRendezvous it does not first wait for every node to connect: the
    # agents' rank assignment that follows waits for every node's keys anyway.
    reached = _store(host, port, timeout, token, rank == 0, seconds)
    # Port 0 (one node): the port the OS gave the store.
    handler = StaticTCPRendezvous(host, reached.port if rank == 0 else port, rank, nodes, params.run_id, seconds)
    handler._store = reached.store  # torch makes its own store in next_rendezvous only when it has none
    _closing_door(handler, reached.door)
    return handler


CPP_ERROR_LEVEL = 2
"""c10's log levels: 0 INFO, 1 WARNING, 2 ERROR (TORCH_CPP_LOG_LEVEL's numbers)."""


@contextmanager
def quiet_store_warnings(verbose: bool) -> Iterator[None]:
    """Within the block, this process's c10 C++ log shows errors only, unless ``verbose``: a c10d
    rendezvous store that vanished (its host's launcher died) makes every store call of the other
    nodes' launchers warn with a C++ stack trace before the error the launcher reports in one
    line. c10 reads TORCH_CPP_LOG_LEVEL once, at start-up; its level is the ``FLAGS_caffe2_log_level``
    variable of libc10, set here (and put back). Where it cannot be found, nothing changes."""
    flag = None if verbose else _cpp_log_level()
    if flag is None or flag.value >= CPP_ERROR_LEVEL:
        yield
        return
    before = flag.value
    flag.value = CPP_ERROR_LEVEL
    try:
        yield
    finally:
        flag.value = before


def _cpp_log_level() -> Optional[ctypes.c_int]:
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libc10.so"), mode=getattr(os, "RTLD_NOLOAD", 0))
        return ctypes.c_int.in_dll(lib, "FLAGS_caffe2_log_level")
    except (OSError, ValueError, AttributeError):  # not Linux's libc10.so, or a build without the flag
        return None
