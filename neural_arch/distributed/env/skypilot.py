"""Detector for a SkyPilot task's ``run`` command (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS, ...).

SkyPilot runs the ``run`` command once per node, not once per GPU, and sets in it:
SKYPILOT_NODE_RANK (this node's index, 0 on the head node), SKYPILOT_NODE_IPS (the nodes' IP
addresses, one a line, the head node's first), SKYPILOT_NUM_NODES, SKYPILOT_NUM_GPUS_PER_NODE
and SKYPILOT_TASK_ID (one id for the task on every node). So this is a node-level
environment: a process started directly by ``run`` is rank NODE_RANK of NUM_NODES, one per
node (local rank 0 of 1), meeting at the first IP on a port derived from the task id. For
one process per GPU, start our launcher (or torchrun) in ``run`` with these values; its
workers are then detected as ``torchrun``, and the launcher itself takes the task id as the
job's token::

    neural-arch launch --nnodes=$SKYPILOT_NUM_NODES --node_rank=$SKYPILOT_NODE_RANK \\
        --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE \\
        --master_addr=$(echo "$SKYPILOT_NODE_IPS" | head -n1) --master_port=29500 train.py

Try it: ``SKYPILOT_NODE_RANK=1 SKYPILOT_NUM_NODES=2 SKYPILOT_NODE_IPS=$'10.0.0.1\\n10.0.0.2'
SKYPILOT_TASK_ID=t neural-arch env``
"""

from __future__ import annotations

from typing import Optional

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
    """The SkyPilot task this process runs in (SKYPILOT_TASK_ID), also under a launcher it started."""
    return environ.get("SKYPILOT_TASK_ID") or None


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if "SKYPILOT_NODE_RANK" not in environ:
        return None
    ips = environ.get("SKYPILOT_NODE_IPS", "").split()
    nodes = env_int(environ, "SKYPILOT_NUM_NODES", len(ips) or 1) or 1
    node = require_int(environ, "SKYPILOT_NODE_RANK")
    job = scheduler_job(environ)
    addr, port = with_master_override(environ, ips[0] if ips else None, derived_port(job) if job else None)
    return ClusterEnv(
        source="skypilot",
        rank=node,
        world_size=nodes,
        node_rank=node,
        num_nodes=nodes,
        master_addr=addr or ("127.0.0.1" if nodes == 1 else None),
        master_port=port,
        job_id=job,
        evidence=said(environ, "SKYPILOT_NUM_NODES") or f"SKYPILOT_NODE_IPS of {len(ips)} nodes",
        started_by="SkyPilot's run command (one process per node)",
    )
