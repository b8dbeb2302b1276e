"""Refuse to run one rank of a multi-rank job as if it were alone.

Use: ``require_process_group("DistributedDataParallel")`` first thing in any entry point
that needs the process group (DDP, the sampler when it would take the world size from the
group, collectives, checkpoint saves). It returns at once when a group exists or the job
really is one process, and otherwise raises ``MissingProcessGroupError``::

    DistributedDataParallel on rank 1: WORLD_SIZE=2 (set by torchrun or the neural_arch
    launcher) says this job has 2 ranks, but no process group is initialised, so this rank
    would run alone as rank 0 of 1; call neural_arch.distributed.init_process_group() first.

Why: every query works without a process group (one process is world size 1), so without
this check a script that forgets ``init_process_group()`` under a launcher would train N
independent copies and exit 0. Whether the job has several ranks is what ``env.detect_cluster_env``
already decides (torchrun/launcher, SLURM step, OpenMPI, MPICH, LSF, Kubernetes, plain
RANK/WORLD_SIZE); a SLURM batch script outside ``srun`` is one process and passes.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

import torch.distributed as dist

from neural_arch.distributed.env import ClusterEnv, detect_cluster_env
from neural_arch.distributed.env.record import first_set

# The variables each detector takes the world size from (env/*.py), in its order of preference.
_SIZE_VARIABLES: dict[str, tuple[str, ...]] = {
    "torchrun": ("WORLD_SIZE",),
    "openmpi": ("OMPI_COMM_WORLD_SIZE",),
    "mpich": ("PMI_SIZE", "MV2_COMM_WORLD_SIZE"),
    "slurm": ("SLURM_NTASKS", "SLURM_NPROCS"),
    "lsf": ("JSM_NAMESPACE_SIZE",),
    "kubernetes": ("WORLD_SIZE",),
    "env": ("WORLD_SIZE",),
}
_STARTERS = {
    "torchrun": "torchrun or the neural_arch launcher",
    "openmpi": "OpenMPI's mpirun",
    "mpich": "mpiexec",
    "slurm": "srun",
    "lsf": "jsrun",
    "kubernetes": "the Kubernetes job",
    "env": "the environment",
}


class MissingProcessGroupError(ValueError):
    """The environment says the job has several ranks, but this process joined no group."""


def require_process_group(what: str, environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise ``MissingProcessGroupError`` if the job has several ranks but no process group
    is initialised; ``what`` names the caller in the message."""
    if dist.is_available() and dist.is_initialized():
        return
    cluster = detect_cluster_env(environ)
    if cluster.world_size > 1:
        raise MissingProcessGroupError(missing_group_message(what, cluster, environ))


def missing_group_message(what: str, cluster: ClusterEnv, environ: Optional[Mapping[str, str]] = None) -> str:
    """The one-line explanation ``require_process_group`` raises with."""
    names = _SIZE_VARIABLES.get(cluster.source, ())
    env = os.environ if environ is None else environ
    name = next((n for n in names if first_set(env, n)), None)
    said = f"{name}={first_set(env, name)}" if name else f"the {cluster.source} environment"
    return (
        f"{what} on rank {cluster.rank}: {said} (set by {_STARTERS.get(cluster.source, cluster.source)}) says "
        f"this job has {cluster.world_size} ranks, but no process group is initialised, so this rank would run "
        f"alone as rank 0 of 1; call neural_arch.distributed.init_process_group() first."
    )
