"""Detector for OpenMPI's ``mpirun`` (OMPI_COMM_WORLD_*).

Try it: ``mpirun -n 2 python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.placement import filled_node_by_node, same_node_master
from neural_arch.distributed.env.record import ClusterEnv, Environ, env_int, first_set, require_int


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if "OMPI_COMM_WORLD_RANK" not in environ or "OMPI_COMM_WORLD_SIZE" not in environ:
        return None
    world = require_int(environ, "OMPI_COMM_WORLD_SIZE")
    local_world = env_int(environ, "OMPI_COMM_WORLD_LOCAL_SIZE", 1) or 1
    job = first_set(environ, "SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")
    master = same_node_master("openmpi", environ, world, local_world, job)
    # Not OMPI_COMM_WORLD_NODE_RANK: that is a rank *within* the node, not the node's index.
    return filled_node_by_node(
        "openmpi",
        environ,
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        world,
        local_world,
        master,
        job,
        size_key="OMPI_COMM_WORLD_SIZE",
        started_by="OpenMPI's mpirun",
    )
