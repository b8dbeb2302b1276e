"""Detectors for HPC launchers: OpenMPI, MPICH / Intel MPI / MVAPICH, SLURM steps, LSF.

Tried by ``env.detect_cluster_env`` in the order its docstring gives. Try one:
``python -c "from neural_arch.distributed.env_hpc import tasks_per_node as t; print(t('2(x3),1'))"``
"""

from __future__ import annotations

import os
from typing import Optional

from neural_arch.distributed.cluster_env import (
    ClusterEnv, Environ, derived_port, env_int, first_set, require_int, with_master_override,
)
from neural_arch.distributed.hostlist import expand_hostlist


def _same_node_master(source: str, environ: Environ, world: int, local_world: int, job_key: Optional[str]) -> tuple[Optional[str], Optional[int]]:
    """MPI launchers export no rendezvous address: on one node use loopback, and a port
    derived from the job (or, lacking one, from the shared parent launcher process)."""
    addr = "127.0.0.1" if local_world == world else None
    key = job_key or (f"ppid-{os.getppid()}" if local_world == world else None)
    addr, port = with_master_override(environ, addr, derived_port(key) if key else None)
    if addr is None:
        raise ValueError(
            f"{source}: a multi-node MPI job does not say where rank 0 runs; export "
            "MASTER_ADDR=<first host> (and MASTER_PORT) to every rank, e.g. `mpirun -x MASTER_ADDR -x MASTER_PORT ...`."
        )
    return addr, port


def _filled_node_by_node(
    source: str, environ: Environ, rank_key: str, local_rank_key: str, world: int, local_world: int,
    master: tuple[Optional[str], Optional[int]], job: Optional[str], num_nodes: Optional[int] = None,
) -> ClusterEnv:
    """A rank of a launcher that fills each node before the next (mpirun's and jsrun's
    default placement), so the node index is ``rank // ranks per node``."""
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
    )


def openmpi(environ: Environ) -> Optional[ClusterEnv]:
    if "OMPI_COMM_WORLD_RANK" not in environ or "OMPI_COMM_WORLD_SIZE" not in environ:
        return None
    world = require_int(environ, "OMPI_COMM_WORLD_SIZE")
    local_world = env_int(environ, "OMPI_COMM_WORLD_LOCAL_SIZE", 1) or 1
    job = first_set(environ, "SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")
    master = _same_node_master("openmpi", environ, world, local_world, job)
    # Not OMPI_COMM_WORLD_NODE_RANK: that is a rank *within* the node, not the node's index.
    return _filled_node_by_node("openmpi", environ, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                world, local_world, master, job)


def mpich(environ: Environ) -> Optional[ClusterEnv]:
    if "PMI_RANK" in environ and "PMI_SIZE" in environ:
        rank_key, size_key = "PMI_RANK", "PMI_SIZE"
        local_key, local_size_key = "MPI_LOCALRANKID", "MPI_LOCALNRANKS"
    elif "MV2_COMM_WORLD_RANK" in environ and "MV2_COMM_WORLD_SIZE" in environ:
        rank_key, size_key = "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"
        local_key, local_size_key = "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"
    else:
        return None
    world = require_int(environ, size_key)
    local_world = env_int(environ, local_size_key, env_int(environ, "MPI_LOCALNRANKS", world)) or world
    job = first_set(environ, "SLURM_JOB_ID", "PBS_JOBID", "PMI_KVSNAME", "PMIX_NAMESPACE")
    master = _same_node_master("mpich", environ, world, local_world, job)
    return _filled_node_by_node("mpich", environ, rank_key, local_key, world, local_world, master, job)


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


def slurm(environ: Environ) -> Optional[ClusterEnv]:
    # Only inside an srun step: a batch script itself has SLURM_PROCID=0 and
    # SLURM_NTASKS=N too, but it is one process, not rank 0 of N.
    if "SLURM_PROCID" not in environ or not first_set(environ, "SLURM_STEP_ID", "SLURM_STEPID"):
        return None
    world = env_int(environ, "SLURM_NTASKS", env_int(environ, "SLURM_NPROCS", 1)) or 1
    nodelist = first_set(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    hosts = expand_hostlist(nodelist) if nodelist else []
    node = env_int(environ, "SLURM_NODEID", 0) or 0
    per_node = tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"]) if environ.get("SLURM_STEP_TASKS_PER_NODE") else (
        tasks_per_node(environ["SLURM_TASKS_PER_NODE"]) if environ.get("SLURM_TASKS_PER_NODE") else [world])
    local_world = per_node[node] if node < len(per_node) else per_node[-1]
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    addr, port = with_master_override(environ, hosts[0] if hosts else None, derived_port(job) if job else None)
    return ClusterEnv(
        source="slurm",
        rank=require_int(environ, "SLURM_PROCID"),
        world_size=world,
        local_rank=env_int(environ, "SLURM_LOCALID", 0) or 0,
        local_world_size=local_world,
        node_rank=node,
        num_nodes=env_int(environ, "SLURM_STEP_NUM_NODES", env_int(environ, "SLURM_NNODES", len(hosts) or 1)) or 1,
        master_addr=addr,
        master_port=port,
        job_id=job,
    )


def lsf(environ: Environ) -> Optional[ClusterEnv]:
    if "JSM_NAMESPACE_RANK" not in environ or "JSM_NAMESPACE_SIZE" not in environ:
        return None
    # LSB_MCPU_HOSTS = "launch 1 node1 42 node2 42": the first entry is the launch node,
    # which runs no ranks when there are others.
    tokens = environ.get("LSB_MCPU_HOSTS", "").split()
    hosts = tokens[0::2]
    compute = hosts[1:] if len(hosts) > 1 else hosts
    job = environ.get("LSB_JOBID")
    master = with_master_override(environ, compute[0] if compute else None, derived_port(job) if job else None)
    world = require_int(environ, "JSM_NAMESPACE_SIZE")
    local_world = env_int(environ, "JSM_NAMESPACE_LOCAL_SIZE", world) or world
    return _filled_node_by_node("lsf", environ, "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK",
                                world, local_world, master, job, num_nodes=len(compute) or 1)
