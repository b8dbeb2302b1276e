"""Detector for MPICH / Intel MPI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID) and MVAPICH (MV2_COMM_WORLD_*).

Try it: ``mpiexec.mpich -n 2 python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.placement import filled_node_by_node, same_node_master
from neural_arch.distributed.env.record import ClusterEnv, Environ, env_int, first_set, require_int

# (rank, size, local rank, local size) variables of each MPI family, tried in this order.
_FAMILIES = (
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"),
)


def detect(environ: Environ) -> Optional[ClusterEnv]:
    found = [keys for keys in _FAMILIES if keys[0] in environ and keys[1] in environ]
    if not found:
        return None
    rank_key, size_key, local_key, local_size_key = found[0]
    world = require_int(environ, size_key)
    local_world = env_int(environ, local_size_key, env_int(environ, "MPI_LOCALNRANKS", world)) or world
    job = first_set(environ, "SLURM_JOB_ID", "PBS_JOBID", "PMI_KVSNAME", "PMIX_NAMESPACE")
    master = same_node_master("mpich", environ, world, local_world, job)
    return filled_node_by_node(
        "mpich", environ, rank_key, local_key, world, local_world, master, job, size_key=size_key, started_by="mpiexec"
    )
