"""Detector for a rank of a SLURM ``srun`` step (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, ...).

Try it: ``srun -n 2 python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
or ``python -c "from neural_arch.distributed.env.slurm import tasks_per_node as t; print(t('2(x3),1'))"``
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.hostlist import expand_hostlist
from neural_arch.distributed.env.record import (
    ClusterEnv,
    Environ,
    derived_port,
    env_int,
    first_set,
    require_int,
    said,
    with_master_override,
)


def tasks_per_node(text: str) -> list[int]:
    """Expand SLURM_TASKS_PER_NODE (``"2(x3),1"`` -> ``[2, 2, 2, 1]``)."""
    counts: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "(x" in part:
                value, repeat = part.rstrip(")").split("(x")
                counts.extend([int(value)] * int(repeat))
            else:
                counts.append(int(part))
        except ValueError:
            raise ValueError(f"SLURM_TASKS_PER_NODE={text!r} is malformed; expected e.g. '2(x3),1'.") from None
    return counts


def _tasks_on_node(environ: Environ, node: int, world: int) -> int:
    # The step's own layout first: a step may use fewer tasks than the whole allocation.
    layout = first_set(environ, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    per_node = tasks_per_node(layout) if layout else [world]
    return per_node[node] if node < len(per_node) else per_node[-1]


def scheduler_job(environ: Environ) -> Optional[str]:
    """The SLURM job this process runs in (SLURM_JOB_ID), also in a batch script or under a
    launcher that an srun step started."""
    return first_set(environ, "SLURM_JOB_ID", "SLURM_JOBID")


def detect(environ: Environ) -> Optional[ClusterEnv]:
    # Only inside an srun step: a batch script itself has SLURM_PROCID=0 and
    # SLURM_NTASKS=N too, but it is one process, not rank 0 of N.
    if "SLURM_PROCID" not in environ or not first_set(environ, "SLURM_STEP_ID", "SLURM_STEPID"):
        return None
    world = env_int(environ, "SLURM_NTASKS", env_int(environ, "SLURM_NPROCS", 1)) or 1
    nodelist = first_set(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    hosts = expand_hostlist(nodelist) if nodelist else []
    node = env_int(environ, "SLURM_NODEID", 0) or 0
    job = scheduler_job(environ)
    addr, port = with_master_override(environ, hosts[0] if hosts else None, derived_port(job) if job else None)
    return ClusterEnv(
        source="slurm",
        rank=require_int(environ, "SLURM_PROCID"),
        world_size=world,
        local_rank=env_int(environ, "SLURM_LOCALID", 0) or 0,
        local_world_size=_tasks_on_node(environ, node, world),
        node_rank=node,
        num_nodes=env_int(environ, "SLURM_STEP_NUM_NODES", env_int(environ, "SLURM_NNODES", len(hosts) or 1)) or 1,
        master_addr=addr,
        master_port=port,
        job_id=job,
        evidence=said(environ, "SLURM_NTASKS", "SLURM_NPROCS"),
        started_by="srun",
    )
