"""Detector for a Kubeflow Trainer v2 ``TrainJob`` pod (the ``torch-distributed`` runtime), and
where that pod reports its progress to (the TrainJob status server).

Kubeflow Trainer v2 runs a TrainJob as a JobSet: one pod per node (``trainer.numNodes``). Its
torch plugin gives the trainer container torchrun's options as ``PET_*`` variables, not ranks:
PET_NNODES, PET_NPROC_PER_NODE (a number, or ``auto``: one per GPU), PET_NODE_RANK (the pod's
Job completion index), PET_MASTER_ADDR (``<trainjob>-node-0-0.<trainjob>``) and PET_MASTER_PORT
(29500). They are meant for a launcher in the container command, ``torchrun`` or ``neural-arch
launch`` (deploy/kubernetes/trainjob.yaml), whose workers are then detected as ``torchrun``. A
process the pod started directly is one process per node: rank PET_NODE_RANK of PET_NNODES,
which is right only when PET_NPROC_PER_NODE is 1, so any other value is refused in one line
naming the fix (no silent world of the wrong size).

With the ``TrainJobStatus`` feature gate (Trainer >= 2.2) the controller also gives every
trainer container KUBEFLOW_TRAINER_SERVER_URL (an HTTPS URL ending in
``/namespaces/<ns>/trainjobs/<name>/status``), KUBEFLOW_TRAINER_SERVER_CA_CERT and
KUBEFLOW_TRAINER_SERVER_TOKEN (paths of the CA certificate and of a rotating service account
token); ``status_server()`` returns them as a ``TrainerStatusServer`` for
``neural_arch.training.kubeflow_progress``, which posts progress there.

Try it: ``KUBERNETES_SERVICE_HOST=x PET_NNODES=2 PET_NODE_RANK=1 PET_NPROC_PER_NODE=1
PET_MASTER_ADDR=tj-node-0-0.tj PET_MASTER_PORT=29500 neural-arch env``
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from neural_arch.distributed.env.record import ClusterEnv, Environ, env_int, require_int, said, with_master_override

STARTED_BY = "Kubeflow Trainer's TrainJob (one process per node)"
STATUS_PATH_MARK = "/namespaces/"


@dataclass(frozen=True)
class TrainerStatusServer:
    """Where a TrainJob's trainer posts its progress (``POST url``, JSON, bearer token)."""

    url: str
    """The TrainJob's status URL, ``https://.../namespaces/<ns>/trainjobs/<name>/status``."""
    token_file: str
    """File holding the bearer token; it rotates, so it is read again for every post."""
    ca_cert_file: str
    """The CA certificate that signed the server's certificate (the client trusts only it)."""


def status_server(environ: Optional[Environ] = None) -> Optional[TrainerStatusServer]:
    """The TrainJob status server this pod reports to, or None outside such a pod (or when the
    controller's ``TrainJobStatus`` feature gate is off: then it sets none of the three)."""
    environ = os.environ if environ is None else environ
    url = environ.get("KUBEFLOW_TRAINER_SERVER_URL")
    token = environ.get("KUBEFLOW_TRAINER_SERVER_TOKEN")
    ca_cert = environ.get("KUBEFLOW_TRAINER_SERVER_CA_CERT")
    if not (url and token and ca_cert):
        return None
    return TrainerStatusServer(url=url, token_file=token, ca_cert_file=ca_cert)


def scheduler_job(environ: Environ) -> Optional[str]:
    """The TrainJob this pod belongs to, ``<namespace>/<name>`` from the status URL, else ``<name>``
    from PET_MASTER_ADDR (``<name>-node-0-0.<name>``); also under a launcher the pod started."""
    if not _is_trainjob_pod(environ):
        return None
    url = environ.get("KUBEFLOW_TRAINER_SERVER_URL", "")
    if STATUS_PATH_MARK in url:  # .../namespaces/<ns>/trainjobs/<name>/status
        parts = url.split(STATUS_PATH_MARK, 1)[1].split("/")
        if len(parts) >= 3 and parts[1] == "trainjobs":
            return f"{parts[0]}/{parts[2]}"
    _host, dot, name = environ.get("PET_MASTER_ADDR", "").partition(".")
    return name.split(".")[0] if dot and name else None


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if not _is_trainjob_pod(environ):
        return None
    nodes, node = require_int(environ, "PET_NNODES"), require_int(environ, "PET_NODE_RANK")
    per_node = environ.get("PET_NPROC_PER_NODE", "1").strip()
    if per_node != "1":
        raise ValueError(
            f"Kubeflow Trainer set PET_NPROC_PER_NODE={per_node} (processes per node), but this process was "
            "started directly by the pod, so it can only be one process per node; start the training under a "
            "launcher in the TrainJob's command (neural-arch launch or torchrun, which read PET_*) or set "
            "trainer.numProcPerNode: 1."
        )
    # Trainer always sets both; an explicit MASTER_ADDR / MASTER_PORT still wins, as everywhere.
    addr, port = with_master_override(environ, environ.get("PET_MASTER_ADDR"), env_int(environ, "PET_MASTER_PORT"))
    return ClusterEnv(
        "kubeflow_trainer",
        node,
        nodes,
        node_rank=node,
        num_nodes=nodes,
        evidence=said(environ, "PET_NNODES"),
        started_by=STARTED_BY,
        master_addr=addr,
        master_port=port,
        job_id=scheduler_job(environ),
    )


def _is_trainjob_pod(environ: Environ) -> bool:
    """A Kubernetes pod with the torch plugin's node variables (torchrun outside Kubernetes reads
    PET_* too, but then nothing sets KUBERNETES_SERVICE_HOST)."""
    return "KUBERNETES_SERVICE_HOST" in environ and "PET_NNODES" in environ and "PET_NODE_RANK" in environ
