"""Kubeflow Trainer v2 TrainJob pods: detection of a directly started process, the TrainJob as
the enclosing job (also for launcher workers), and the status server's variables.

Run: ``.venv/bin/python -m pytest tests/distributed/env/test_kubeflow_trainer.py -q`` (pure unit
tests on the environment the trainer controller's torch and TrainJobStatus plugins give a pod,
kubeflow/trainer v2.3.0 pkg/runtime/framework/plugins/{torch,trainjobstatus}; < 1 s).
"""

import pytest

from neural_arch.distributed.env import detect_cluster_env
from neural_arch.distributed.env.kubeflow_trainer import TrainerStatusServer, status_server

STATUS_URL = (
    "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/neural-arch-train/status"
)
STATUS = {
    "KUBEFLOW_TRAINER_SERVER_URL": STATUS_URL,
    "KUBEFLOW_TRAINER_SERVER_CA_CERT": "/var/run/secrets/kubeflow/trainer/ca.crt",
    "KUBEFLOW_TRAINER_SERVER_TOKEN": "/var/run/secrets/kubeflow/trainer/token",
}


def pod(node_rank: int, nnodes: int = 3, per_node: str = "1", **extra: str) -> dict:
    """What the torch plugin sets in the trainer container of node ``node_rank``."""
    env = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "PET_NNODES": str(nnodes),
        "PET_NPROC_PER_NODE": per_node,
        "PET_NODE_RANK": str(node_rank),
        "PET_MASTER_ADDR": "neural-arch-train-node-0-0.neural-arch-train",
        "PET_MASTER_PORT": "29500",
    }
    return {**env, **extra}


def test_a_directly_started_process_is_one_per_node():
    got = detect_cluster_env(pod(2))
    assert (got.source, got.rank, got.world_size, got.local_rank, got.local_world_size) == (
        "kubeflow_trainer",
        2,
        3,
        0,
        1,
    )
    assert (got.node_rank, got.num_nodes) == (2, 3)
    assert (got.master_addr, got.master_port) == ("neural-arch-train-node-0-0.neural-arch-train", 29500)
    assert got.job_id == "neural-arch-train" and got.evidence == "PET_NNODES=3"
    assert (got.scheduler, got.scheduler_job_id) == ("kubeflow_trainer", "neural-arch-train")


def test_the_status_url_names_namespace_and_trainjob():
    got = detect_cluster_env(pod(0, **STATUS))
    assert got.job_id == got.scheduler_job_id == "team-a/neural-arch-train"


@pytest.mark.parametrize("per_node", ["4", "auto"])
def test_several_processes_per_node_without_a_launcher_is_refused(per_node):
    with pytest.raises(ValueError, match=f"PET_NPROC_PER_NODE={per_node} .*neural-arch launch or torchrun"):
        detect_cluster_env(pod(0, per_node=per_node))


def test_launcher_workers_are_torchrun_inside_the_trainjob():
    worker = pod(1, nnodes=2, per_node="4", RANK="5", LOCAL_RANK="1", WORLD_SIZE="8", LOCAL_WORLD_SIZE="4")
    worker.update(
        GROUP_RANK="1", TORCHELASTIC_RUN_ID="none", MASTER_ADDR="neural-arch-train-node-0-0.neural-arch-train"
    )
    worker.update(MASTER_PORT="29500", **STATUS)
    got = detect_cluster_env(worker)
    assert (got.source, got.rank, got.world_size, got.local_rank) == ("torchrun", 5, 8, 1)
    assert (got.scheduler, got.scheduler_job_id) == ("kubeflow_trainer", "team-a/neural-arch-train")


def test_torchrun_variables_outside_kubernetes_are_not_a_trainjob():
    env = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "1"}
    assert detect_cluster_env(env).source == "local"


def test_status_server_needs_all_three_variables():
    assert status_server(STATUS) == TrainerStatusServer(
        url=STATUS_URL,
        token_file="/var/run/secrets/kubeflow/trainer/token",
        ca_cert_file="/var/run/secrets/kubeflow/trainer/ca.crt",
    )
    for missing in STATUS:
        assert status_server({k: v for k, v in STATUS.items() if k != missing}) is None
    assert status_server({}) is None


def test_a_malformed_node_count_names_the_variable():
    with pytest.raises(ValueError, match="PET_NNODES='two'"):
        detect_cluster_env(pod(0, PET_NNODES="two"))
