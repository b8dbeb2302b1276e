"""Detector for IBM LSF's ``jsrun`` (JSM_NAMESPACE_*, LSB_*).

Try it: ``jsrun -n 2 python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.placement import filled_node_by_node
from neural_arch.distributed.env.record import (
    ClusterEnv,
    Environ,
    derived_port,
    env_int,
    require_int,
    with_master_override,
)


def scheduler_job(environ: Environ) -> Optional[str]:
    """The LSF job this process runs in (LSB_JOBID), also under a launcher the job started."""
    return environ.get("LSB_JOBID") or None


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if "JSM_NAMESPACE_RANK" not in environ or "JSM_NAMESPACE_SIZE" not in environ:
        return None
    # LSB_MCPU_HOSTS = "launch 1 node1 42 node2 42": the first entry is the launch node,
    # which runs no ranks when there are others.
    hosts = environ.get("LSB_MCPU_HOSTS", "").split()[0::2]
    compute = hosts[1:] if len(hosts) > 1 else hosts
    job = scheduler_job(environ)
    master = with_master_override(environ, compute[0] if compute else None, derived_port(job) if job else None)
    world = require_int(environ, "JSM_NAMESPACE_SIZE")
    local_world = env_int(environ, "JSM_NAMESPACE_LOCAL_SIZE", world) or world
    return filled_node_by_node(
        "lsf",
        environ,
        "JSM_NAMESPACE_RANK",
        "JSM_NAMESPACE_LOCAL_RANK",
        world,
        local_world,
        master,
        job,
        num_nodes=len(compute) or 1,
        size_key="JSM_NAMESPACE_SIZE",
        started_by="jsrun",
    )
