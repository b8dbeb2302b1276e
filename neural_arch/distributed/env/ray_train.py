"""Detector for a Ray Train worker (``ray.train.torch.TorchTrainer``): RAY_JOB_ID with RANK and WORLD_SIZE.

Ray Train's torch backend gives each training worker torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT) and joins the process group
before the training function runs (``init_process_group()`` adopts that group). Every process
Ray starts also carries RAY_JOB_ID, the Ray job of the driver that called ``trainer.fit()``;
a Ray task or actor that is not a Train worker has no RANK and is one process.

Why second, right after torchrun: Ray's workers are started by the node's raylet and inherit
whatever started it, so a Ray cluster brought up inside an ``srun`` step (SLURM_PROCID),
under ``mpirun`` or in a KubeRay pod (KUBERNETES_SERVICE_HOST) passes those variables to
every worker, where they describe the raylet, not the worker. The enclosing scheduler's job
is still recorded (``scheduler``, ``scheduler_job_id``). torchrun started inside a Ray task
sets TORCHELASTIC_RUN_ID and stays torchrun.

Try it: ``RAY_JOB_ID=02000000 RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 NODE_RANK=1
MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 neural-arch env``
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from neural_arch.distributed.env.placement import from_rank_variables
from neural_arch.distributed.env.record import ClusterEnv, Environ, env_int

STARTED_BY = "Ray Train's TorchTrainer"


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if "RAY_JOB_ID" not in environ or "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    found = from_rank_variables("ray_train", environ, STARTED_BY)
    node = env_int(environ, "NODE_RANK", 0) or 0  # Ray's name for torchrun's GROUP_RANK
    return replace(found, node_rank=node, job_id=environ.get("RAY_JOB_ID") or None)
