"""Detector for a rank started by ``mpiexec`` under PBS Pro with HPE's PALS (PALS_RANKID, PBS_*).

PALS sets PALS_RANKID (the rank), PALS_LOCAL_RANKID (the rank on its node) and PALS_NODEID
(the node's index) in every rank; the process count comes from Cray PMI's PMI_SIZE (and
PMI_LOCAL_SIZE per node), which the same ranks carry. PBS gives the job id (PBS_JOBID) and
PBS_NODEFILE, the job's hosts one line per MPI slot, first the host that runs rank 0: its first
line is the rendezvous address. Where that file cannot be read on this node, a one-node job
meets on loopback and a multi-node one needs ``mpiexec --env MASTER_ADDR=HOST``.

Tried before ``mpich``: these ranks also carry PMI_RANK / PMI_SIZE, and PALS says more (the
node's index, the job's hosts, the job id).

Try it: ``mpiexec -n 2 --ppn 2 python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
(in a PBS job).
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.placement import same_node_master
from neural_arch.distributed.env.record import (
    ClusterEnv,
    Environ,
    derived_port,
    env_int,
    require_int,
    said,
    with_master_override,
)


def scheduler_job(environ: Environ) -> Optional[str]:
    """The PBS job this process runs in (PBS_JOBID), also under a launcher the job started."""
    return environ.get("PBS_JOBID") or None


def node_file_hosts(environ: Environ) -> list[str]:
    """The job's distinct hosts in PBS_NODEFILE's order; empty where the file is not readable here."""
    path = environ.get("PBS_NODEFILE")
    try:
        with open(path or "", encoding="utf-8") as lines:
            return list(dict.fromkeys(line.strip() for line in lines if line.strip()))
    except OSError:
        return []


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if "PALS_RANKID" not in environ:
        return None
    if "PMI_SIZE" not in environ:
        raise ValueError(
            "pbs: PALS_RANKID is set but PMI_SIZE is not, so the number of ranks is unknown; start the "
            "ranks with PBS Pro's mpiexec (cray-pals), or export RANK and WORLD_SIZE instead."
        )
    world = require_int(environ, "PMI_SIZE")
    local_world = env_int(environ, "PMI_LOCAL_SIZE", world) or world
    hosts, job = node_file_hosts(environ), scheduler_job(environ)
    if hosts:
        master = with_master_override(environ, hosts[0], derived_port(job or hosts[0]))
    else:
        master = same_node_master("pbs", environ, world, local_world, job, "`mpiexec --env MASTER_ADDR=HOST ...`")
    return ClusterEnv(
        source="pbs",
        rank=require_int(environ, "PALS_RANKID"),
        world_size=world,
        local_rank=env_int(environ, "PALS_LOCAL_RANKID", 0) or 0,
        local_world_size=local_world,
        node_rank=env_int(environ, "PALS_NODEID", 0) or 0,
        num_nodes=len(hosts) or -(-world // local_world),
        master_addr=master[0],
        master_port=master[1],
        job_id=job,
        evidence=said(environ, "PMI_SIZE"),
        started_by="PBS Pro's mpiexec (PALS)",
    )
