"""Ray Train worker detection: the variables Ray Train's torch backend gives each worker.

Run: ``.venv/bin/python -m pytest tests/distributed/env/test_ray_train_env.py -q``
Pure unit tests on explicit environment dicts: what a TorchTrainer worker of Ray 2.60 has
(``ray/train/torch/config.py`` sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
MASTER_ADDR, MASTER_PORT; every Ray worker process has RAY_JOB_ID), seen in a real worker by
tests/integrations/test_ray_train.py.
"""

import pytest

from neural_arch.distributed.env import detect_cluster_env

WORKER = {
    "RAY_JOB_ID": "02000000",
    "RAY_RAYLET_PID": "4242",
    "RANK": "3",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "NODE_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "45117",
}


def test_a_torchtrainer_worker_is_ray_train():
    e = detect_cluster_env(WORKER)
    assert (e.source, e.rank, e.world_size, e.local_rank, e.local_world_size) == ("ray_train", 3, 4, 1, 2)
    assert (e.node_rank, e.num_nodes, e.master_addr, e.master_port) == (1, 2, "10.0.0.1", 45117)
    assert (e.job_id, e.evidence, e.started_by) == ("02000000", "WORLD_SIZE=4", "Ray Train's TorchTrainer")


@pytest.mark.parametrize(
    "starter",
    [
        {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "77"},  # ray start in srun
        {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},  # a Ray cluster started by mpirun
        {"KUBERNETES_SERVICE_HOST": "10.96.0.1"},  # a KubeRay pod
    ],
)
def test_what_started_the_raylet_does_not_describe_the_worker(starter):
    e = detect_cluster_env({**starter, **WORKER})
    assert (e.source, e.rank, e.world_size) == ("ray_train", 3, 4)


def test_the_slurm_job_around_the_ray_cluster_is_still_recorded():
    e = detect_cluster_env({"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "77", **WORKER})
    assert (e.scheduler, e.scheduler_job_id) == ("slurm", "77")


def test_torchrun_inside_a_ray_task_stays_torchrun():
    env = {**WORKER, "TORCHELASTIC_RUN_ID": "r1"}
    assert detect_cluster_env(env).source == "torchrun"


def test_a_ray_task_that_is_no_train_worker_is_one_process():
    assert detect_cluster_env({"RAY_JOB_ID": "02000000", "RAY_RAYLET_PID": "1"}).source == "local"
