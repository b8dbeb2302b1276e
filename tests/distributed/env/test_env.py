"""Cluster detection for every source, SLURM hostlists, and clear errors for bad values.

Run: ``.venv/bin/python -m pytest tests/distributed/env/test_env.py``
Pure unit tests on explicit environment dicts; the real SLURM/OpenMPI runs are in
tests/distributed/env/test_clusters.py.
"""

import os
import shutil
import subprocess

import pytest

from neural_arch.distributed.env import derived_port, detect_cluster_env, expand_hostlist, tasks_per_node

HOSTLISTS = [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[01-03]", ["node01", "node02", "node03"]),
    ("node[008-011]", ["node008", "node009", "node010", "node011"]),
    ("node[1,3,5]", ["node1", "node3", "node5"]),
    ("node[1-2,7,9-10]", ["node1", "node2", "node7", "node9", "node10"]),
    ("a,b,c", ["a", "b", "c"]),
    ("a[1-2],b[3-4]", ["a1", "a2", "b3", "b4"]),
    ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
    ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
    ("gpu-[1,3-4].cluster.org", ["gpu-1.cluster.org", "gpu-3.cluster.org", "gpu-4.cluster.org"]),
    ("x[9-11]", ["x9", "x10", "x11"]),
    ("login,cn[1-2],gpu[01-02]", ["login", "cn1", "cn2", "gpu01", "gpu02"]),
    ("node[0-0]", ["node0"]),
    ("c[1-2]s[0-1]", ["c1s0", "c1s1", "c2s0", "c2s1"]),
    ("node[1-2],node1", ["node1", "node2", "node1"]),
    ("node[3,1]", ["node3", "node1"]),
    ("my-host_01", ["my-host_01"]),
    ("node[1-3],node5", ["node1", "node2", "node3", "node5"]),
    ("h[098-101]", ["h098", "h099", "h100", "h101"]),
]


@pytest.mark.parametrize("text, hosts", HOSTLISTS)
def test_expand_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol (slurm-wlm) not installed")
def test_expand_hostlist_agrees_with_scontrol(tmp_path):
    # scontrol expands hostlists without a controller; it only needs a parseable slurm.conf.
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=x\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n"
    )
    env = dict(os.environ, SLURM_CONF=str(conf))
    compared = 0
    for text, _hosts in HOSTLISTS:
        proc = subprocess.run(
            ["scontrol", "show", "hostnames", text], capture_output=True, text=True, timeout=20, env=env
        )
        if "Invalid hostlist" in proc.stdout + proc.stderr:
            continue  # a suffix after a bracket group: newer SLURM only, we accept it too
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == expand_hostlist(text), text
        compared += 1
    assert compared >= 15


@pytest.mark.parametrize(
    "text, match",
    [
        ("node[1-3", "without a matching"),
        ("node1-3]", "without a matching"),
        ("node[3-1]", "runs backwards"),
        ("node[a-b]", "not a number"),
        ("node[]", "empty brackets"),
        ("", "is empty"),
        ("n[[1-2]]", "nested"),
    ],
)
def test_bad_hostlists(text, match):
    with pytest.raises(ValueError, match=match):
        expand_hostlist(text)


def test_tasks_per_node():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("4") == [4]
    with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE"):
        tasks_per_node("2(xz)")


def test_torchrun():
    env = detect_cluster_env(
        {
            "TORCHELASTIC_RUN_ID": "abc",
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1",
            "MASTER_ADDR": "h0",
            "MASTER_PORT": "29500",
        }
    )
    assert (
        env.source,
        env.rank,
        env.world_size,
        env.local_rank,
        env.local_world_size,
        env.node_rank,
        env.num_nodes,
        env.master_addr,
        env.master_port,
    ) == ("torchrun", 3, 4, 1, 2, 1, 2, "h0", 29500)


SLURM = {
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "4",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "cn[07-08]",
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_NNODES": "2",
}


def test_slurm_step():
    env = detect_cluster_env(SLURM)
    assert (
        env.source,
        env.rank,
        env.world_size,
        env.local_rank,
        env.local_world_size,
        env.node_rank,
        env.num_nodes,
        env.master_addr,
        env.job_id,
    ) == ("slurm", 3, 4, 1, 2, 1, 2, "cn07", "4242")
    assert env.master_port == derived_port("4242") and 12000 <= env.master_port < 32000
    assert detect_cluster_env(dict(SLURM, MASTER_PORT="29999", MASTER_ADDR="x")).master_port == 29999


def test_slurm_batch_script_without_srun_is_one_process():
    batch = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_ID"}
    batch["SLURM_PROCID"] = "0"
    assert detect_cluster_env(batch).source == "local"


def test_openmpi_single_node_derives_loopback_and_shared_port():
    base = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_NAMESPACE": "prterun-h-123@1"}
    envs = [
        detect_cluster_env(dict(base, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_LOCAL_RANK=str(r))) for r in (0, 1)
    ]
    assert [e.rank for e in envs] == [0, 1] and all(e.source == "openmpi" for e in envs)
    assert envs[0].master_addr == "127.0.0.1" and envs[0].master_port == envs[1].master_port


def test_openmpi_multi_node_needs_master_addr():
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    with pytest.raises(ValueError, match="export MASTER_ADDR"):
        detect_cluster_env(env)
    got = detect_cluster_env(dict(env, MASTER_ADDR="head", MASTER_PORT="23456"))
    assert (got.master_addr, got.master_port, got.num_nodes) == ("head", 23456, 2)


def test_openmpi_wins_over_slurm_inside_an_allocation():
    env = dict(SLURM, OMPI_COMM_WORLD_RANK="2", OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_LOCAL_SIZE="4")
    got = detect_cluster_env(env)
    assert (got.source, got.rank) == ("openmpi", 2)


def test_mpich_and_intel_mpi():
    got = detect_cluster_env({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"})
    assert (got.source, got.rank, got.world_size, got.local_rank, got.master_addr) == ("mpich", 1, 2, 1, "127.0.0.1")


def test_mvapich():
    got = detect_cluster_env(
        {
            "MV2_COMM_WORLD_RANK": "5",
            "MV2_COMM_WORLD_SIZE": "8",
            "MV2_COMM_WORLD_LOCAL_RANK": "1",
            "MV2_COMM_WORLD_LOCAL_SIZE": "4",
            "MASTER_ADDR": "n0",
            "MASTER_PORT": "1234",
        }
    )
    assert (got.source, got.rank, got.local_rank, got.node_rank, got.num_nodes) == ("mpich", 5, 1, 1, 2)


def test_lsf_jsrun():
    got = detect_cluster_env(
        {
            "JSM_NAMESPACE_RANK": "7",
            "JSM_NAMESPACE_SIZE": "12",
            "JSM_NAMESPACE_LOCAL_RANK": "1",
            "JSM_NAMESPACE_LOCAL_SIZE": "6",
            "LSB_JOBID": "99",
            "LSB_MCPU_HOSTS": "batch1 1 f01n01 42 f01n02 42",
        }
    )
    assert (got.source, got.rank, got.node_rank, got.num_nodes, got.master_addr) == ("lsf", 7, 1, 2, "f01n01")
    assert got.master_port == derived_port("99")


def test_kubernetes_pytorchjob_and_indexed_job():
    job = detect_cluster_env(
        {
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "RANK": "1",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "job-master-0",
            "MASTER_PORT": "23456",
        }
    )
    assert (job.source, job.rank, job.master_addr) == ("kubernetes", 1, "job-master-0")
    indexed = detect_cluster_env(
        {
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "JOB_COMPLETION_INDEX": "2",
            "WORLD_SIZE": "4",
            "MASTER_ADDR": "train-0.train",
            "MASTER_PORT": "29500",
        }
    )
    assert (indexed.source, indexed.rank, indexed.world_size, indexed.node_rank) == ("kubernetes", 2, 4, 2)


def test_plain_env_and_local():
    assert detect_cluster_env({"RANK": "0", "WORLD_SIZE": "2"}).source == "env"
    local = detect_cluster_env({})
    assert (local.source, local.rank, local.world_size) == ("local", 0, 1)


@pytest.mark.parametrize(
    "env, match",
    [
        ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 is outside 0..1"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "zero"}, "WORLD_SIZE='zero' is not an integer"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "world size 0 must be >= 1"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"}, "local rank 3 is outside"),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"}, "master port 70000"),
        (dict(SLURM, SLURM_PROCID="4"), "slurm environment: rank 4 is outside 0..3"),
        (
            {"OMPI_COMM_WORLD_RANK": "-1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
            "rank -1 is outside",
        ),
        (dict(SLURM, SLURM_JOB_NODELIST="cn[1-"), "without a matching"),
    ],
)
def test_bad_values_are_clear_errors(env, match):
    with pytest.raises(ValueError, match=match):
        detect_cluster_env(env)
