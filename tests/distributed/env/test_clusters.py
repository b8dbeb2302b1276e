"""Real schedulers form the world by detection alone: SLURM (srun, sbatch) and OpenMPI (mpirun).

Run: ``.venv/bin/python -m pytest tests/distributed/env/test_clusters.py`` (as root, with Debian's slurm-wlm,
munge and openmpi-bin installed; ``.ci/run`` installs them). Tests skip with the reason
when a program is missing. No torchrun or launcher is involved: the probe script calls
``init_process_group()`` and the ranks must find each other from the scheduler's variables.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.clusters import local_slurm, slurm_missing_reason
from tests.helpers.paths import REPO, SCRIPTS

# every test here spawns ranks or runs a launcher/scheduler; the local SLURM is the machine's one
pytestmark = [pytest.mark.multiprocess, pytest.mark.machine]

PROBE = str(SCRIPTS / "launch_probe.py")


def records(out: Path) -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in out.glob("rank_*.json")), key=lambda r: r["rank"])


def assert_two_rank_world(out: Path, source: str) -> None:
    got = records(out)
    assert [r["rank"] for r in got] == [0, 1], got
    assert all(r["source"] == source and r["world"] == 2 and r["sum"] == 1.0 for r in got), got


@pytest.fixture(scope="module")
def slurm():
    reason = slurm_missing_reason()
    if reason:
        pytest.skip(reason)
    with local_slurm() as cluster:
        yield cluster


def test_srun_forms_a_two_rank_world(slurm, tmp_path):
    proc = subprocess.run(
        ["srun", "-n", "2", "--time=2", sys.executable, PROBE, str(tmp_path), "ok"],
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_two_rank_world(tmp_path, "slurm")


def test_sbatch_wait_job_script(slurm, tmp_path):
    job = tmp_path / "job.sh"
    job.write_text(
        "#!/bin/bash\n"
        "#SBATCH --ntasks=2\n"
        "#SBATCH --time=2\n"
        f"#SBATCH --output={tmp_path}/slurm-%j.out\n"
        f"srun {sys.executable} {PROBE} {tmp_path} ok\n"
    )
    proc = subprocess.run(["sbatch", "--wait", str(job)], env=slurm.env, capture_output=True, text=True, timeout=180)
    logs = "".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    assert_two_rank_world(tmp_path, "slurm")


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun not found: install Debian's openmpi-bin (.ci/run does)"
)
def test_mpirun_forms_a_two_rank_world(tmp_path):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, PROBE, str(tmp_path), "ok"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_two_rank_world(tmp_path, "openmpi")


@pytest.mark.parametrize(
    "script, tasks", [("train_distributed.sh", 2), ("train_distributed_multinode.sh", 2), ("train.sh", 1)]
)
def test_hpc_job_scripts_run_on_slurm(slurm, tmp_path, script, tasks):
    # Shrunk to this one node by command-line options, which override the #SBATCH lines.
    hpc = REPO / "hpc" / script
    cmd = [
        "sbatch",
        "--wait",
        "--nodes=1",
        f"--ntasks-per-node={tasks}",
        f"--ntasks={tasks}",
        "--cpus-per-task=1",
        "--time=5",
        f"--output={tmp_path}/slurm-%j.out",
        str(hpc),
        PROBE,
        str(tmp_path),
        "ok",
    ]
    env = dict(slurm.env, PATH=f"{Path(sys.executable).parent}:{slurm.env['PATH']}")  # `python` = this venv
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    logs = "".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    got = records(tmp_path)
    assert [r["rank"] for r in got] == list(range(tasks)), logs
    assert all(r["world"] == tasks for r in got)
    if tasks > 1:
        assert all(r["source"] == "slurm" for r in got)


def train_command(run_dir: Path) -> list[str]:
    """``neural-arch train`` for 4 tiny steps, as a rank of a world the scheduler made."""
    sets = {
        "run.dir": run_dir,
        "training.steps": 4,
        "logging.progress": "false",
        "logging.tensorboard": "false",
        "training.global_batch_size": 8,
    }
    return [sys.executable, "-m", "neural_arch.cli", "train", *(f"--set={k}={v}" for k, v in sets.items())]


def one_thread(env: dict[str, str]) -> dict[str, str]:
    """One intra-op thread a rank, as the launcher gives 2 workers on 2 cores: the local SLURM
    (TaskPlugin=task/none) does not bind tasks, so each rank would start a thread per core: 4 OpenMP
    threads on 2 cores made a step 4-5x slower than under mpirun, which binds each rank to a core."""
    return dict(env, OMP_NUM_THREADS="1")


# A hang guard, not a verdict: unloaded each command takes ~10 s (mostly importing torch twice);
# the suite beside a CPU hog (load 5-8 on 2 cores) makes that several times longer.
@pytest.mark.timeout(330)
def test_neural_arch_train_under_srun(slurm, tmp_path):
    # `neural-arch train` joins the world the scheduler made (no launcher of its own).
    cmd = ["srun", "-n", "2", "--time=5", *train_command(tmp_path)]
    proc = subprocess.run(cmd, env=one_thread(slurm.env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "on 2 process(es)" in proc.stdout


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun not found: install Debian's openmpi-bin (.ci/run does)"
)
@pytest.mark.timeout(330)
def test_neural_arch_train_under_mpirun(tmp_path):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", *train_command(tmp_path)]
    proc = subprocess.run(cmd, env=one_thread(dict(os.environ)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "on 2 process(es)" in proc.stdout
