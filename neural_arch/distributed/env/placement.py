"""How detectors turn a launcher's variables into a ``ClusterEnv``: the helpers several of
them share, so each detector file only says which variables its launcher sets.

Not run directly; ``detect.py`` lists the detectors that use these. Try one:
``python -c "from neural_arch.distributed.env.placement import from_rank_variables as f;
print(f('env', {'RANK': '1', 'WORLD_SIZE': '2'}))"``
"""

from __future__ import annotations

import os
from typing import Optional

from neural_arch.distributed.env.record import (
    ClusterEnv,
    Environ,
    derived_port,
    env_int,
    require_int,
    said,
    with_master_override,
)

Master = tuple[Optional[str], Optional[int]]
"""The rendezvous address and port, either of which may be unknown."""


def from_rank_variables(source: str, environ: Environ, started_by: str) -> ClusterEnv:
    """A rank described by torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK,
    ...), which torchrun, Kubeflow's PyTorchJob and hand-written job scripts all set."""
    world = require_int(environ, "WORLD_SIZE")
    local_world = env_int(environ, "LOCAL_WORLD_SIZE", world) or max(world, 1)
    addr, port = with_master_override(environ, None, None)
    return ClusterEnv(
        source=source,
        rank=require_int(environ, "RANK"),
        world_size=world,
        local_rank=env_int(environ, "LOCAL_RANK", 0) or 0,
        local_world_size=local_world,
        node_rank=env_int(environ, "GROUP_RANK", 0) or 0,
        num_nodes=max(1, -(-world // local_world)),
        master_addr=addr,
        master_port=port,
        job_id=environ.get("TORCHELASTIC_RUN_ID"),
        evidence=said(environ, "WORLD_SIZE"),
        started_by=started_by,
    )


MPIRUN_EXPORT = "`mpirun -x MASTER_ADDR -x MASTER_PORT ...`"
"""How to pass MASTER_ADDR to every rank, for the error of a multi-node job without it."""


def same_node_master(
    source: str,
    environ: Environ,
    world: int,
    local_world: int,
    job_key: Optional[str],
    export: str = MPIRUN_EXPORT,
) -> Master:
    """MPI launchers (and Flux) export no rendezvous address: on one node use loopback, and a
    port derived from the job (or, lacking one, from the shared parent launcher process)."""
    addr = "127.0.0.1" if local_world == world else None
    key = job_key or (f"ppid-{os.getppid()}" if local_world == world else None)
    addr, port = with_master_override(environ, addr, derived_port(key) if key else None)
    if addr is None:
        raise ValueError(
            f"{source}: a multi-node job does not say where rank 0 runs; export "
            f"MASTER_ADDR=<first host> (and MASTER_PORT) to every rank, e.g. {export}."
        )
    return addr, port


def filled_node_by_node(
    source: str,
    environ: Environ,
    rank_key: str,
    local_rank_key: str,
    world: int,
    local_world: int,
    master: Master,
    job: Optional[str],
    num_nodes: Optional[int] = None,
    *,
    size_key: str,
    started_by: str,
) -> ClusterEnv:
    """A rank of a launcher that fills each node before the next (mpirun's and jsrun's
    default placement), so the node index is ``rank // ranks per node``; ``size_key`` is the
    variable the world size came from (the evidence)."""
    rank = require_int(environ, rank_key)
    return ClusterEnv(
        source=source,
        rank=rank,
        world_size=world,
        local_rank=env_int(environ, local_rank_key, 0) or 0,
        local_world_size=local_world,
        node_rank=rank // local_world,
        num_nodes=num_nodes or -(-world // local_world),
        master_addr=master[0],
        master_port=master[1],
        job_id=job,
        evidence=said(environ, size_key),
        started_by=started_by,
    )
