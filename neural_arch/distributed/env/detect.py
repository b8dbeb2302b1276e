"""Where am I running? ``detect_cluster_env()`` answers from the launcher's variables.

Try it: ``python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
or ``neural-arch env``.

THE detection order. Each source has one small detector (one file in this package); they
are tried in ``DETECTORS`` order and the first that recognises its variables wins:

1. ``torchrun``   torchrun / torch elastic / our launcher (TORCHELASTIC_RUN_ID, RANK, ...)
2. ``ray_train`` a Ray Train worker (RAY_JOB_ID with RANK, WORLD_SIZE, NODE_RANK, MASTER_ADDR)
3. ``openmpi``    mpirun of OpenMPI (OMPI_COMM_WORLD_*)
4. ``flux``       a Flux job's task (FLUX_TASK_RANK, FLUX_JOB_SIZE, FLUX_JOB_ID, ...)
5. ``pbs``        PBS Pro's mpiexec with HPE PALS (PALS_RANKID, PMI_SIZE, PBS_NODEFILE, PBS_JOBID)
6. ``mpich``      MPICH / Intel MPI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID) and MVAPICH
                  (MV2_COMM_WORLD_*)
7. ``slurm``      an ``srun`` step (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, ...)
8. ``lsf``        IBM LSF jsrun (JSM_NAMESPACE_*, LSB_*)
9. ``skypilot``   a SkyPilot ``run`` command, one process per node (SKYPILOT_NODE_RANK,
                  SKYPILOT_NODE_IPS, SKYPILOT_NUM_NODES, SKYPILOT_TASK_ID)
10. ``kubeflow_trainer`` a Kubeflow Trainer v2 TrainJob pod started without a launcher, one
                  process per node (KUBERNETES_SERVICE_HOST + PET_NNODES, PET_NODE_RANK, ...)
11. ``kubernetes`` a PyTorchJob or Indexed Job pod (KUBERNETES_SERVICE_HOST + RANK or
                  JOB_COMPLETION_INDEX, WORLD_SIZE, MASTER_ADDR)
12. ``env``       plain RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
13. ``local``     one process, world size 1

Why this order: the most specific launcher wins. torchrun first, because its workers may
also carry the variables of the scheduler that started torchrun (SLURM_PROCID of the one
srun task per node). Ray Train next: Ray's workers inherit whatever started the raylet (an
srun step's SLURM_PROCID, mpirun's OMPI_*, a KubeRay pod's KUBERNETES_SERVICE_HOST), which
describes the raylet, not the worker. MPI before SLURM, because ``mpirun`` inside an
allocation starts its daemons with srun, so its ranks inherit the daemon's SLURM_PROCID,
not their own rank. Flux before SLURM for the same reason (a Flux instance started by srun passes its broker's
SLURM_* to every task). Flux and PALS before ``mpich``: their ranks also carry PMI_RANK and
PMI_SIZE, and they say more (the node, the job id, the hosts). SkyPilot after the MPIs and
schedulers, since its ``run`` command often starts one of those. A Kubeflow TrainJob pod
before the generic Kubernetes pod (it says more: the TrainJob, its nodes). Kubernetes and plain
RANK/WORLD_SIZE last, since many launchers also set those. An explicit MASTER_ADDR /
MASTER_PORT always overrides what a detector derived.

Each detector records on the ``ClusterEnv`` what it read: the job id, the variable the
world size came from (``evidence``) and who started the process (``started_by``). A
scheduler's detector also has ``scheduler_job(environ)``: the id of the batch job this
process runs in even where a launcher started it (``scheduler``, ``scheduler_job_id``; what
``checkpoint.requeue_on_stop`` requeues). These detectors are the only code that reads
launcher and scheduler variables (tests/test_scheduler_variables.py checks), and they only
read: ``detect_cluster_env`` returns a frozen record and writes nothing. A new scheduler is
one file here plus one line in ``ORDER``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import replace
from typing import Callable, Optional

from neural_arch.distributed.env.record import ClusterEnv, Environ, launcher_settings

Detector = Callable[[Environ], Optional[ClusterEnv]]
SchedulerJob = Optional[Callable[[Environ], Optional[str]]]

ORDER: tuple[str, ...] = (
    "torchrun",
    "ray_train",
    "openmpi",
    "flux",
    "pbs",
    "mpich",
    "slurm",
    "lsf",
    "skypilot",
    "kubeflow_trainer",
    "kubernetes",
    "env=plain:detect",
    "local=plain:detect_local",
)
"""The detection order: ``NAME`` is module ``NAME`` of this package with its ``detect`` (and, for a
scheduler, its ``scheduler_job``); ``NAME=MODULE:FUNCTION`` names another function. A new
scheduler is its file plus its line here."""


def _load(entry: str) -> tuple[str, Detector, SchedulerJob]:
    name, _, where = entry.partition("=")
    module_name, _, function = (where or name).partition(":")
    module = importlib.import_module(f"{__package__}.{module_name}")
    return name, getattr(module, function or "detect"), getattr(module, "scheduler_job", None)


DETECTORS: tuple[tuple[str, Detector, SchedulerJob], ...] = tuple(_load(entry) for entry in ORDER)
"""(name, detector, the scheduler's job id or None), in the order they are tried; the first
detector that returns a ClusterEnv wins, and the first scheduler with a job id names it."""


def detect_cluster_env(environ: Optional[Environ] = None) -> ClusterEnv:
    """Describe this process's place in the job from ``environ`` (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    for _name, detector, _job in DETECTORS:
        found = detector(environ)
        if found is not None:
            return replace(found, **launcher_settings(environ), **enclosing_job(environ))  # type: ignore[arg-type]
    raise AssertionError("the local detector always matches")


def enclosing_job(environ: Environ) -> dict[str, Optional[str]]:
    """The batch job this process runs in: the first scheduler in ``DETECTORS`` with a job id."""
    for name, _detector, job_of in DETECTORS:
        job = job_of(environ) if job_of else None
        if job:
            return {"scheduler": name, "scheduler_job_id": job}
    return {"scheduler": None, "scheduler_job_id": None}
