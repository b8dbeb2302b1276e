"""Detector for a task of a Flux job (``flux run`` / ``flux submit``: FLUX_TASK_RANK, FLUX_JOB_SIZE, ...).

The Flux job shell sets, in every task: FLUX_TASK_RANK (the rank), FLUX_TASK_LOCAL_ID (the
rank on its node), FLUX_JOB_SIZE (the number of tasks), FLUX_JOB_NNODES and FLUX_JOB_ID.
It exports no host list, so a one-node job meets on loopback at a port derived from the job
id, and a multi-node job needs MASTER_ADDR (``flux run --env=MASTER_ADDR=HOST ...``). Tasks
fill each node before the next (Flux's default), so the node index is ``rank // per node``.

Try it: ``flux run -n 2 python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.placement import filled_node_by_node, same_node_master
from neural_arch.distributed.env.record import ClusterEnv, Environ, env_int, require_int


def scheduler_job(environ: Environ) -> Optional[str]:
    """The Flux job this process runs in (FLUX_JOB_ID), also under a launcher the job started."""
    return environ.get("FLUX_JOB_ID") or None


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if "FLUX_TASK_RANK" not in environ or "FLUX_JOB_SIZE" not in environ:
        return None
    world = require_int(environ, "FLUX_JOB_SIZE")
    nodes = max(1, env_int(environ, "FLUX_JOB_NNODES", 1) or 1)
    local_world = -(-world // nodes)
    job = scheduler_job(environ)
    master = same_node_master("flux", environ, world, local_world, job, "`flux run --env=MASTER_ADDR=HOST ...`")
    return filled_node_by_node(
        "flux",
        environ,
        "FLUX_TASK_RANK",
        "FLUX_TASK_LOCAL_ID",
        world,
        local_world,
        master,
        job,
        num_nodes=nodes,
        size_key="FLUX_JOB_SIZE",
        started_by="flux run",
    )
