"""Kubernetes manifests parse, and the variables they give a pod are detected correctly.

Run: ``.venv/bin/python -m pytest tests/test_deploy.py`` (no cluster needed: a pod's
environment is reconstructed from the manifest and fed to detect_cluster_env).
"""

from pathlib import Path

import yaml

from neural_arch.distributed.env import detect_cluster_env

DEPLOY = Path(__file__).parents[1] / "deploy" / "kubernetes"


def test_indexed_job_pods_detect_their_rank():
    docs = list(yaml.safe_load_all((DEPLOY / "indexed-job.yaml").read_text()))
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["spec"]["completionMode"] == "Indexed"
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["WORLD_SIZE"]) == job["spec"]["completions"] == job["spec"]["parallelism"]
    service = next(d for d in docs if d["kind"] == "Service")
    assert env["MASTER_ADDR"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    for index in range(job["spec"]["completions"]):
        pod = dict(env, KUBERNETES_SERVICE_HOST="10.96.0.1", JOB_COMPLETION_INDEX=str(index))
        got = detect_cluster_env(pod)
        assert (got.source, got.rank, got.world_size, got.master_port) == ("kubernetes", index, 4, 29500)


def test_pytorchjob_shape():
    job = yaml.safe_load((DEPLOY / "pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob"
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] >= 1
    # What the training operator injects into worker 2 of such a job:
    pod = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "MASTER_ADDR": "neural-arch-train-master-0",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": str(1 + specs["Worker"]["replicas"]),
        "RANK": "3",
    }
    got = detect_cluster_env(pod)
    assert (got.source, got.rank, got.world_size) == ("kubernetes", 3, 4)
