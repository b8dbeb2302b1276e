"""Where am I running? ``detect_cluster_env()`` answers from the launcher's variables.

Try it: ``python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
or ``neural-arch env``.

This module and the two it imports (``cluster_env.py``: the record and variable readers;
``env_hpc.py``: the MPI, SLURM and LSF detectors) are the only code that reads launcher
environment variables. Each source has one small detector; they are tried in ``DETECTORS``
order and the first that recognises its variables wins:

1. ``torchrun``   torchrun / torch elastic / our launcher (TORCHELASTIC_RUN_ID, RANK, ...)
2. ``openmpi``    mpirun of OpenMPI (OMPI_COMM_WORLD_*)
3. ``mpich``      MPICH / Intel MPI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID) and MVAPICH
                  (MV2_COMM_WORLD_*)
4. ``slurm``      an ``srun`` step (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, ...)
5. ``lsf``        IBM LSF jsrun (JSM_NAMESPACE_*, LSB_*)
6. ``kubernetes`` a PyTorchJob or Indexed Job pod (KUBERNETES_SERVICE_HOST + RANK or
                  JOB_COMPLETION_INDEX, WORLD_SIZE, MASTER_ADDR)
7. ``env``        plain RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
8. ``local``      one process, world size 1

MPI comes before SLURM because ``mpirun`` inside an allocation starts its daemons with
srun, so its ranks inherit the daemon's SLURM_PROCID, not their own rank. An explicit
MASTER_ADDR / MASTER_PORT always overrides what a detector derived.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable, Optional

from neural_arch.distributed.cluster_env import (
    ClusterEnv, Environ, derived_port, env_int, launcher_settings, require_int, with_master_override,
)
from neural_arch.distributed.env_hpc import lsf, mpich, openmpi, slurm, tasks_per_node
from neural_arch.distributed.hostlist import expand_hostlist

__all__ = ["ClusterEnv", "DETECTORS", "detect_cluster_env", "derived_port", "env_int", "expand_hostlist", "tasks_per_node"]


def _rank_vars(source: str, environ: Environ) -> ClusterEnv:
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
    )


def _torchrun(environ: Environ) -> Optional[ClusterEnv]:
    # The elastic agent (torchrun, our launcher) always sets a run id or GROUP_RANK.
    if not ("TORCHELASTIC_RUN_ID" in environ or "GROUP_RANK" in environ):
        return None
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return _rank_vars("torchrun", environ)


def _kubernetes(environ: Environ) -> Optional[ClusterEnv]:
    if "KUBERNETES_SERVICE_HOST" not in environ or "WORLD_SIZE" not in environ:
        return None
    if "RANK" in environ:  # PyTorchJob (Kubeflow training operator)
        return _rank_vars("kubernetes", environ)
    if "JOB_COMPLETION_INDEX" in environ:  # plain Indexed Job: the pod index is the rank
        world, index = require_int(environ, "WORLD_SIZE"), require_int(environ, "JOB_COMPLETION_INDEX")
        addr, port = with_master_override(environ, None, None)
        return ClusterEnv(source="kubernetes", rank=index, world_size=world, node_rank=index, num_nodes=world,
                          master_addr=addr, master_port=port)
    return None


def _env(environ: Environ) -> Optional[ClusterEnv]:
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return _rank_vars("env", environ)


def _local(environ: Environ) -> Optional[ClusterEnv]:
    addr, port = with_master_override(environ, None, None)
    return ClusterEnv(source="local", rank=0, world_size=1, master_addr=addr, master_port=port)


Detector = Callable[[Environ], Optional[ClusterEnv]]

DETECTORS: tuple[tuple[str, Detector], ...] = (
    ("torchrun", _torchrun),
    ("openmpi", openmpi),
    ("mpich", mpich),
    ("slurm", slurm),
    ("lsf", lsf),
    ("kubernetes", _kubernetes),
    ("env", _env),
    ("local", _local),
)
"""Detectors in the order they are tried; the first that returns a ClusterEnv wins."""


def detect_cluster_env(environ: Optional[Environ] = None) -> ClusterEnv:
    """Describe this process's place in the job from ``environ`` (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    for _name, detector in DETECTORS:
        found = detector(environ)
        if found is not None:
            return replace(found, **launcher_settings(environ))  # type: ignore[arg-type]
    raise AssertionError("the local detector always matches")
