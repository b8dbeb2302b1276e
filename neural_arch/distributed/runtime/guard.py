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
already decides (torchrun/launcher, an ``srun`` step, OpenMPI, MPICH, Flux, PBS/PALS, LSF,
SkyPilot, Kubernetes, plain RANK/WORLD_SIZE), and the message names the variable and starter
the detector recorded; a SLURM batch script outside ``srun`` is one process and passes.
"""

from __future__ import annotations

from typing import Mapping, Optional

import torch.distributed as dist

from neural_arch.distributed.env import ClusterEnv, detect_cluster_env


class MissingProcessGroupError(ValueError):
    """The environment says the job has several ranks, but this process joined no group."""


def require_process_group(what: str, environ: Optional[Mapping[str, str]] = None) -> None:
    """Raise ``MissingProcessGroupError`` if the job has several ranks but no process group
    is initialised; ``what`` names the caller in the message."""
    if dist.is_available() and dist.is_initialized():
        return
    cluster = detect_cluster_env(environ)
    if cluster.world_size > 1:
        raise MissingProcessGroupError(missing_group_message(what, cluster))


def missing_group_message(what: str, cluster: ClusterEnv) -> str:
    """The one-line explanation ``require_process_group`` raises with: the variable the
    detector took the world size from, and who set it, as the detector recorded them."""
    said = cluster.evidence or f"the {cluster.source} environment"
    return (
        f"{what} on rank {cluster.rank}: {said} (set by {cluster.started_by or cluster.source}) says "
        f"this job has {cluster.world_size} ranks, but no process group is initialised, so this rank would run "
        f"alone as rank 0 of 1; call neural_arch.distributed.init_process_group() first."
    )
