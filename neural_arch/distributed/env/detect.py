"""Where am I running? ``detect_cluster_env()`` answers from the launcher's variables.

Try it: ``python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
or ``neural-arch env``.

THE detection order. Each source has one small detector (one file in this package); they
are tried in ``DETECTORS`` order and the first that recognises its variables wins:

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

Why this order: the most specific launcher wins. torchrun first, because its workers may
also carry the variables of the scheduler that started torchrun (SLURM_PROCID of the one
srun task per node). MPI before SLURM, because ``mpirun`` inside an allocation starts its
daemons with srun, so its ranks inherit the daemon's SLURM_PROCID, not their own rank.
Kubernetes and plain RANK/WORLD_SIZE last, since many launchers also set those. An
explicit MASTER_ADDR / MASTER_PORT always overrides what a detector derived.

These detectors are the only code that reads launcher environment variables, and they
only read: ``detect_cluster_env`` returns a frozen record and writes nothing.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable, Optional

from neural_arch.distributed.env import kubernetes, lsf, mpich, openmpi, plain, slurm, torchrun
from neural_arch.distributed.env.record import ClusterEnv, Environ, launcher_settings

Detector = Callable[[Environ], Optional[ClusterEnv]]

DETECTORS: tuple[tuple[str, Detector], ...] = (
    ("torchrun", torchrun.detect),
    ("openmpi", openmpi.detect),
    ("mpich", mpich.detect),
    ("slurm", slurm.detect),
    ("lsf", lsf.detect),
    ("kubernetes", kubernetes.detect),
    ("env", plain.detect),
    ("local", plain.detect_local),
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
