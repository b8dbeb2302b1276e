"""Detector for a Kubernetes pod: a Kubeflow PyTorchJob (RANK, WORLD_SIZE, MASTER_ADDR) or a
plain Indexed Job (JOB_COMPLETION_INDEX is the rank). ``deploy/kubernetes/`` has both.

Try it: ``KUBERNETES_SERVICE_HOST=x JOB_COMPLETION_INDEX=1 WORLD_SIZE=2 python -c
"from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.placement import from_rank_variables
from neural_arch.distributed.env.record import ClusterEnv, Environ, require_int, said, with_master_override

STARTED_BY = "the Kubernetes job"


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if "KUBERNETES_SERVICE_HOST" not in environ or "WORLD_SIZE" not in environ:
        return None
    if "RANK" in environ:  # PyTorchJob (Kubeflow training operator)
        return from_rank_variables("kubernetes", environ, STARTED_BY)
    if "JOB_COMPLETION_INDEX" not in environ:
        return None
    # A plain Indexed Job runs one pod per node: the pod index is both rank and node.
    world, index = require_int(environ, "WORLD_SIZE"), require_int(environ, "JOB_COMPLETION_INDEX")
    addr, port = with_master_override(environ, None, None)
    return ClusterEnv(
        source="kubernetes",
        rank=index,
        world_size=world,
        node_rank=index,
        num_nodes=world,
        master_addr=addr,
        master_port=port,
        evidence=said(environ, "WORLD_SIZE"),
        started_by=STARTED_BY,
    )
