"""A forgotten ``init_process_group()`` in a multi-rank job is an error, not N silent copies.

Run: ``.venv/bin/python -m pytest tests/distributed/runtime/test_guard.py -q``
The in-process tests set a launcher's variables (the conftest restores the environment);
the last one runs a real script under the launcher on 2 workers.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import neural_arch.distributed as nd
from neural_arch.distributed import MissingProcessGroupError

FIX = "call neural_arch.distributed.init_process_group() first"

# (variables a starter sets for rank 1 of 2, the variable the message must name)
STARTERS = {
    "torchrun": (
        {"TORCHELASTIC_RUN_ID": "x", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
        "WORLD_SIZE=2",
    ),
    "srun": (
        {
            "SLURM_PROCID": "1",
            "SLURM_STEP_ID": "0",
            "SLURM_NTASKS": "2",
            "SLURM_JOB_ID": "7",
            "SLURM_JOB_NODELIST": "cn1",
            "SLURM_LOCALID": "1",
            "SLURM_TASKS_PER_NODE": "2",
        },
        "SLURM_NTASKS=2",
    ),
    "srun_nprocs": (
        {
            "SLURM_PROCID": "1",
            "SLURM_STEP_ID": "0",
            "SLURM_NPROCS": "2",
            "SLURM_JOB_ID": "7",
            "SLURM_JOB_NODELIST": "cn1",
            "SLURM_TASKS_PER_NODE": "2",
        },
        "SLURM_NPROCS=2",
    ),
    "openmpi": (
        {
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        },
        "OMPI_COMM_WORLD_SIZE=2",
    ),
    "mpich": ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, "PMI_SIZE=2"),
    "plain": ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1234"}, "WORLD_SIZE=2"),
    "flux": (
        {"FLUX_TASK_RANK": "1", "FLUX_TASK_LOCAL_ID": "1", "FLUX_JOB_SIZE": "2", "FLUX_JOB_ID": "f1"},
        "FLUX_JOB_SIZE=2",
    ),
    "pbs": ({"PALS_RANKID": "1", "PALS_LOCAL_RANKID": "1", "PMI_SIZE": "2", "PBS_JOBID": "3.pbs"}, "PMI_SIZE=2"),
    "skypilot": (
        {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_IPS": "a\nb"},
        "SKYPILOT_NUM_NODES=2",
    ),
}

ENTRY_POINTS = {
    "DistributedDataParallel": lambda: nd.DistributedDataParallel(nn.Linear(2, 1)),
    "DistributedSampler": lambda: nd.DistributedSampler(dataset_size=10),
    "all_reduce": lambda: nd.all_reduce(np.ones(3)),
    "all_gather": lambda: nd.all_gather(torch.ones(2)),
    "broadcast": lambda: nd.broadcast(torch.ones(2)),
    "reduce_scatter": lambda: nd.reduce_scatter(torch.ones(2)),
    "all_gather_object": lambda: nd.all_gather_object(1),
    "barrier": nd.barrier,
    "global_batch_loss": lambda: nd.global_batch_loss(torch.ones(3), 6),
    "global_mean_std": lambda: nd.global_mean_std(np.ones((3, 2))),
    "save_checkpoint": lambda: nd.save_checkpoint("unused", 1, {}),
}


@pytest.mark.parametrize("starter", STARTERS)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_entry_points_refuse_a_missing_group(monkeypatch, starter, entry):
    variables, named = STARTERS[starter]
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(MissingProcessGroupError) as caught:
        ENTRY_POINTS[entry]()
    message = str(caught.value)
    assert message.startswith(entry) and f" on rank 1: {named} " in message and message.endswith(FIX + "."), message
    assert "\n" not in message and "says this job has 2 ranks" in message


def test_one_process_jobs_pass(monkeypatch, tmp_path):
    # No launcher; a SLURM batch script outside srun (one process, though SLURM_NTASKS=4);
    # and a sampler given its share explicitly.
    for setting in ({}, {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "7"}):
        for key, value in setting.items():
            monkeypatch.setenv(key, value)
        assert nd.all_reduce(np.ones(2)).tolist() == [1.0, 1.0]
        nd.DistributedDataParallel(nn.Linear(2, 1))
        assert list(nd.DistributedSampler(dataset_size=3, shuffle=False)) == [0, 1, 2]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert list(nd.DistributedSampler(dataset_size=4, num_replicas=2, rank=1, shuffle=False)) == [1, 3]
    assert nd.get_world_size() == 1  # queries still answer without a group


SCRIPT = """
import torch, neural_arch.distributed as nd
model = nd.DistributedDataParallel(torch.nn.Linear(2, 1))   # forgot nd.init_process_group()
print("trained alone", flush=True)
"""


def summary(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr[proc.stderr.index("neural_arch launcher: job failed") :]


@pytest.mark.multiprocess
def test_launched_script_without_init_fails_with_one_line(tmp_path):
    script = tmp_path / "forgot_init.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "neural_arch.distributed.launcher",
            "--nproc_per_node=2",
            "--max_restarts=0",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "trained alone" not in out
    # The first rank to fail is in the summary; the launcher may stop the other before it gets there.
    found = re.search(
        r"MissingProcessGroupError: DistributedDataParallel on rank [01]: WORLD_SIZE=2 \(set by torchrun or "
        r"the neural_arch launcher\) says this job has 2 ranks, .*; " + re.escape(FIX),
        summary(proc),
    )
    assert found, out
