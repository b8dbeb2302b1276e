"""Flux, PBS Pro/PALS and SkyPilot detection, what every detector records (evidence, starter,
job id, enclosing scheduler job), and ``neural-arch env`` showing them.

Run: ``.venv/bin/python -m pytest tests/distributed/env/test_schedulers.py -q``
Pure unit tests on explicit environment dicts holding the variables each scheduler documents
(flux-core's job shell, HPE PALS / Cray PMI with PBS Pro, SkyPilot's native variables).
"""

import pytest

from neural_arch.distributed.env import derived_port, detect_cluster_env


def place(env):
    """(source, rank, world, local rank, local world, node rank, nodes, master addr, master port, job id)."""
    e = detect_cluster_env(env)
    return (
        e.source,
        e.rank,
        e.world_size,
        e.local_rank,
        e.local_world_size,
        e.node_rank,
        e.num_nodes,
        e.master_addr,
        e.master_port,
        e.job_id,
    )


FLUX = {"FLUX_TASK_RANK": "3", "FLUX_TASK_LOCAL_ID": "1", "FLUX_JOB_SIZE": "4", "FLUX_JOB_NNODES": "2"}
FLUX_ID = "ƒ2bxMtPK5"


def test_flux_multi_node_task():
    env = dict(FLUX, FLUX_JOB_ID=FLUX_ID, MASTER_ADDR="node1", MASTER_PORT="29500")
    assert place(env) == ("flux", 3, 4, 1, 2, 1, 2, "node1", 29500, FLUX_ID)
    with pytest.raises(ValueError, match=r"flux: a multi-node job .*`flux run --env=MASTER_ADDR=HOST"):
        detect_cluster_env(dict(FLUX, FLUX_JOB_ID=FLUX_ID))


def test_flux_one_node_meets_on_loopback_at_the_jobs_port():
    env = {"FLUX_TASK_RANK": "1", "FLUX_TASK_LOCAL_ID": "1", "FLUX_JOB_SIZE": "2", "FLUX_JOB_NNODES": "1"}
    got = place(dict(env, FLUX_JOB_ID=FLUX_ID))
    assert got == ("flux", 1, 2, 1, 2, 0, 1, "127.0.0.1", derived_port(FLUX_ID), FLUX_ID)


def test_flux_wins_over_its_pmi_and_the_slurm_step_that_started_the_instance():
    # `srun flux start`: every task inherits the broker's srun step; Flux's PMI sets PMI_RANK/PMI_SIZE.
    slurm = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "77"}
    env = dict(FLUX, **slurm, PMI_RANK="3", PMI_SIZE="4", FLUX_JOB_ID=FLUX_ID, MASTER_ADDR="n1", MASTER_PORT="1")
    got = detect_cluster_env(env)
    assert (got.source, got.rank, got.scheduler, got.scheduler_job_id) == ("flux", 3, "flux", FLUX_ID)


PBS_JOB = "4242.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"
# What PBS Pro's mpiexec (PALS) and Cray PMI give rank 5 of `mpiexec -n 8 --ppn 4` on two nodes.
PALS = {
    "PALS_RANKID": "5",
    "PALS_LOCAL_RANKID": "1",
    "PALS_NODEID": "1",
    "PALS_APID": "6b2a",
    "PMI_RANK": "5",
    "PMI_SIZE": "8",
    "PMI_LOCAL_RANK": "1",
    "PMI_LOCAL_SIZE": "4",
    "PBS_JOBID": PBS_JOB,
}


def test_pbs_pals_rank_meets_at_the_node_files_first_host(tmp_path):
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("x3001c0s13b0n0\n" * 4 + "x3001c0s13b1n0\n" * 4)
    got = place(dict(PALS, PBS_NODEFILE=str(nodefile)))
    assert got == ("pbs", 5, 8, 1, 4, 1, 2, "x3001c0s13b0n0", derived_port(PBS_JOB), PBS_JOB)
    assert place(dict(PALS, PBS_NODEFILE=str(nodefile), MASTER_ADDR="h", MASTER_PORT="2345"))[7:9] == ("h", 2345)


def test_pbs_without_a_readable_node_file(tmp_path):
    missing = str(tmp_path / "not-on-this-node")
    with pytest.raises(ValueError, match=r"pbs: a multi-node job .*`mpiexec --env MASTER_ADDR=HOST"):
        detect_cluster_env(dict(PALS, PBS_NODEFILE=missing))
    one_node = dict(PALS, PALS_RANKID="1", PALS_NODEID="0", PMI_SIZE="2", PMI_LOCAL_SIZE="2", PBS_NODEFILE=missing)
    assert place(one_node) == ("pbs", 1, 2, 1, 2, 0, 1, "127.0.0.1", derived_port(PBS_JOB), PBS_JOB)


def test_pbs_needs_the_process_count():
    with pytest.raises(ValueError, match="PALS_RANKID is set but PMI_SIZE is not"):
        detect_cluster_env({"PALS_RANKID": "0", "PBS_JOBID": PBS_JOB})


SKY_TASK = "sky-2024-05-01-10-00-00-000000_mycluster_3"
SKY_IPS = "10.128.0.7\n10.128.0.9\n10.128.0.8"


def test_skypilot_run_is_one_process_per_node():
    env = {"SKYPILOT_NODE_RANK": "2", "SKYPILOT_NUM_NODES": "3", "SKYPILOT_NODE_IPS": SKY_IPS}
    env.update(SKYPILOT_NUM_GPUS_PER_NODE="8", SKYPILOT_TASK_ID=SKY_TASK)
    # Rank = node rank, world = nodes, local 0 of 1: the run command's one process per node.
    assert place(env) == ("skypilot", 2, 3, 0, 1, 2, 3, "10.128.0.7", derived_port(SKY_TASK), SKY_TASK)
    single = {"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_IPS": "10.0.0.5"}
    assert place(single)[:7] == ("skypilot", 0, 1, 0, 1, 0, 1)


def test_skypilot_launcher_workers_are_torchrun_inside_the_skypilot_task():
    env = {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_IPS": "a\nb", "SKYPILOT_TASK_ID": "t"}
    worker = dict(env, TORCHELASTIC_RUN_ID="run", RANK="9", WORLD_SIZE="16", LOCAL_RANK="1", LOCAL_WORLD_SIZE="8")
    got = detect_cluster_env(dict(worker, GROUP_RANK="1", MASTER_ADDR="a", MASTER_PORT="29500"))
    assert (got.source, got.rank, got.node_rank, got.scheduler, got.scheduler_job_id) == (
        "torchrun",
        9,
        1,
        "skypilot",
        "t",
    )
    # The launcher itself (one per node) sees the node-level environment: its job id is the task's.
    assert detect_cluster_env(env).job_id == "t"


SLURM_STEP = {"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "7"}

RECORDED = {
    "torchrun": (
        {"TORCHELASTIC_RUN_ID": "r", "RANK": "1", "WORLD_SIZE": "2"},
        "WORLD_SIZE=2",
        "torchrun or the neural_arch launcher",
    ),
    "slurm": (SLURM_STEP, "SLURM_NTASKS=2", "srun"),
    "slurm nprocs": ({**SLURM_STEP, "SLURM_NTASKS": "", "SLURM_NPROCS": "2"}, "SLURM_NPROCS=2", "srun"),
    "openmpi": (
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
        "OMPI_COMM_WORLD_SIZE=2",
        "OpenMPI's mpirun",
    ),
    "mpich": ({"PMI_RANK": "1", "PMI_SIZE": "2"}, "PMI_SIZE=2", "mpiexec"),
    "mvapich": ({"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2"}, "MV2_COMM_WORLD_SIZE=2", "mpiexec"),
    "lsf": ({"JSM_NAMESPACE_RANK": "1", "JSM_NAMESPACE_SIZE": "2", "LSB_JOBID": "9"}, "JSM_NAMESPACE_SIZE=2", "jsrun"),
    "flux": ({**FLUX, "MASTER_ADDR": "n"}, "FLUX_JOB_SIZE=4", "flux run"),
    "pbs": ({**PALS, "MASTER_ADDR": "n"}, "PMI_SIZE=8", "PBS Pro's mpiexec (PALS)"),
    "skypilot": (
        {"SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "a\nb"},
        "SKYPILOT_NODE_IPS of 2 nodes",
        "SkyPilot's run command (one process per node)",
    ),
    "kubernetes": (
        {"KUBERNETES_SERVICE_HOST": "k", "JOB_COMPLETION_INDEX": "1", "WORLD_SIZE": "2"},
        "WORLD_SIZE=2",
        "the Kubernetes job",
    ),
    "env": ({"RANK": "1", "WORLD_SIZE": "2"}, "WORLD_SIZE=2", "the environment"),
}


@pytest.mark.parametrize("case", RECORDED)
def test_each_detector_records_its_evidence_and_starter(case):
    env, evidence, started_by = RECORDED[case]
    got = detect_cluster_env(env)
    assert (got.evidence, got.started_by) == (evidence, started_by)
    assert "\n" not in got.evidence


@pytest.mark.parametrize(
    "env, scheduler, job",
    [
        ({}, None, None),
        ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}, "slurm", "7"),  # a batch script, outside srun
        (
            {**SLURM_STEP, "TORCHELASTIC_RUN_ID": "r", "RANK": "3", "WORLD_SIZE": "4"},
            "slurm",
            "7",
        ),  # our launcher under srun
        ({"LSB_JOBID": "12"}, "lsf", "12"),
        ({"PBS_JOBID": PBS_JOB, "RANK": "0", "WORLD_SIZE": "2"}, "pbs", PBS_JOB),
        ({"FLUX_JOB_ID": FLUX_ID}, "flux", FLUX_ID),
        ({"SKYPILOT_TASK_ID": SKY_TASK}, "skypilot", SKY_TASK),
    ],
)
def test_the_enclosing_scheduler_job_is_recorded_under_any_starter(env, scheduler, job):
    got = detect_cluster_env(env)
    assert (got.scheduler, got.scheduler_job_id) == (scheduler, job)


@pytest.mark.parametrize("case", ["flux", "pbs", "skypilot"])
def test_neural_arch_env_shows_the_new_schedulers(monkeypatch, tmp_path, case):
    from neural_arch.cli.env import report_lines

    env = {
        "flux": dict(FLUX, FLUX_JOB_ID=FLUX_ID, MASTER_ADDR="node1", MASTER_PORT="29500"),
        "pbs": dict(PALS, PBS_NODEFILE=str(tmp_path / "nodefile")),
        "skypilot": {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2"},
    }[case]
    (tmp_path / "nodefile").write_text("h0\nh0\nh0\nh0\nh1\nh1\nh1\nh1\n")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    lines = "\n".join(report_lines())
    expected = {
        "flux": [
            "cluster:          flux",
            "rank:             3 of 4 (local 1 of 2)",
            "master:           node1:29500",
            f"job id:           {FLUX_ID}",
        ],
        "pbs": [
            "cluster:          pbs",
            "rank:             5 of 8 (local 1 of 4)",
            "node:             1 of 2",
            f"job id:           {PBS_JOB}",
        ],
        "skypilot": [
            "cluster:          skypilot",
            "rank:             1 of 2 (local 0 of 1)",
            "master:           10.0.0.1:-",
        ],
    }[case]
    for line in expected:
        assert line in lines, lines
