"""torch elastic's rendezvous handlers, with stores that listen on one address and a job check.

Use (``DistributedLauncher`` does): ``handler = rendezvous_handler(params, token)`` in place
of torch's ``get_rendezvous_handler(params)``; ``params`` is a c10d or static
``RendezvousParameters``, ``token`` the job token nodes must share (None: one node, or no
token to check).

What differs from torch's own handlers, and why:
- The rendezvous store and, for c10d, the agent store that rank 0's agent hosts for the
  workers listen on the address their host name resolves to (``listen.py``), not on
  every interface.
- The stores are created here, before any rendezvous key is read or written, so a node of
  another job is refused (``job_token.claim_job``) before it can join or disturb this one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Callable, Optional

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousParameters
from torch.distributed.elastic.rendezvous.api import RendezvousInfo, RendezvousStoreInfo
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler
from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from neural_arch.distributed.launcher.job_token import JobToken, claim_job
from neural_arch.distributed.launcher.listen import client_store, rendezvous_store, serving_store

DEFAULT_PORT = 29400
AGENT_STORE_TIMEOUT = timedelta(seconds=300)
"""torch's default for the agent store it would have created itself."""


def rendezvous_handler(params: RendezvousParameters, token: Optional[JobToken]) -> RendezvousHandler:
    """A handler for ``params`` (backend ``c10d`` or ``static``) whose stores listen on one address."""
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=DEFAULT_PORT)
    if params.backend == "static":
        return _static_handler(params, host, port, token)
    store = rendezvous_store(
        host, port, timedelta(seconds=params.get_as_int("read_timeout", 60) or 60), params.get_as_bool("is_host")
    )
    _check_job(store, token, host, store.port)
    handler = create_handler(store, C10dRendezvousBackend(store, params.run_id), params)
    # Rank 0's agent hosts the workers' bootstrap store through this method; torch's version
    # listens on all interfaces. Replaced on the instance because torch's create_handler
    # always builds its own class.
    handler._create_tcp_store_server = _agent_store  # type: ignore[method-assign]
    handler.next_rendezvous = _republishing(handler.next_rendezvous)  # type: ignore[method-assign]
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


def _static_handler(params: RendezvousParameters, host: str, port: int, token: Optional[JobToken]) -> RendezvousHandler:
    rank, nodes = int(params.config["rank"]), params.max_nodes
    seconds = int(params.config.get("timeout", 600))
    timeout = timedelta(seconds=seconds)
    # Node 0 hosts. Unlike torch's StaticTCPRendezvous it does not first wait for every node to
    # connect: it claims the job at once (else a foreign node connecting first could claim
    # it), and the agents' rank assignment that follows waits for every node's keys anyway.
    store = serving_store(host, port, timeout) if rank == 0 else client_store(host, port, timeout)
    _check_job(store, token, host, port)
    # Port 0 (one node): the port the OS gave the store.
    handler = StaticTCPRendezvous(host, store.port if rank == 0 else port, rank, nodes, params.run_id, seconds)
    handler._store = store  # torch makes its own store in next_rendezvous only when it has none
    return handler


def _check_job(store: dist.Store, token: Optional[JobToken], host: str, port: int) -> None:
    if token is not None:
        claim_job(store, token, f"{host}:{port}")
