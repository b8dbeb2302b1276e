"""Stopping and starting again as a user does: Ctrl-C, SIGTERM, SLURM's warning signal, a rerun.

Run: ``.venv/bin/python -m pytest tests/training/test_stop.py -q`` (the SLURM test needs root
and Debian's slurm-wlm + munge, which ``.ci/run`` installs; it skips with the reason otherwise).

Each stopped run is compared with an uninterrupted run of the same command: the stop saves
a checkpoint at the step it ends on, the same command continues from there, and the final
float64 parameters are bitwise equal. The signal is sent once the run has logged a few
metric rows, so it lands mid-training at a step the test does not choose.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli import cli
from tests.helpers.clusters import local_slurm, slurm_missing_reason
from tests.helpers.long_run import LONG, STEPS, start, wait_for_rows
from tests.helpers.multiproc import run_ranks
from tests.helpers.paths import REPO
from tests.helpers.run_outputs import assert_params, final_params
from tests.helpers.trainer_runs import BASE

pytestmark = pytest.mark.multiprocess  # every test here starts training processes


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("whole") / "run"
    proc = cli("train", *LONG, "--set", f"run.dir={run}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "signum, procs",
    [(signal.SIGINT, 1), (signal.SIGTERM, 2), (signal.SIGUSR1, 2)],
    ids=["ctrl-c", "sigterm-launcher", "usr1-launcher"],
)
def test_a_signal_saves_and_the_same_command_continues(tmp_path, uninterrupted, signum, procs):
    run = tmp_path / "run"
    nproc = ["--nproc-per-node", str(procs)]
    proc = start(run, *nproc)
    wait_for_rows(run, 3, proc)
    proc.send_signal(signum)  # to the command: one process, or the launcher of two (USR1: passed on, no restart)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, out + err
    # One process says it itself; under the launcher rank 0's line reaches the console, then the launcher's.
    said = [line for line in (out + err).splitlines() if f"stopped by {signum.name} at step" in line]
    assert said and "Run the same command to continue" in said[0], out + err
    assert "Traceback" not in out + err and "Run the same command to continue" in err.splitlines()[-1], out + err
    step = int(said[0].split(" at step ")[1].split()[0])
    assert 0 < step < STEPS and (run / "checkpoints" / f"step_{step:08d}").is_dir()
    if procs == 1:  # continuing is the same under the launcher (and is checked on SLURM below)
        again = cli("train", *LONG, "--set", f"run.dir={run}")
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"resuming from step {step} of {STEPS}" in again.stdout
        assert_params(final_params(run), final_params(uninterrupted), atol=0)


@pytest.mark.timeout(120)
def test_rerunning_a_finished_run_does_nothing(tmp_path):
    run = tmp_path / "run"
    args = [*BASE, "--set", f"run.dir={run}", "training.steps=6"]
    assert cli("train", *args).returncode == 0
    outputs = files(run)
    again = cli("train", *args)
    assert again.returncode == 0, again.stderr
    assert "already at step 6 of 6; nothing to do (use --resume none or a new run.dir" in again.stdout
    assert files(run) == outputs


def files(run: Path) -> dict[Path, tuple[int, bytes]]:
    """Every output file of a run with its modification time and bytes (the job lock is not an output)."""
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in run.rglob("*") if p.is_file() and p.name != ".lock"}


@pytest.mark.machine  # the local SLURM
@pytest.mark.timeout(420)
def test_slurm_warning_signal_saves_requeues_and_ends_bitwise_equal(tmp_path):
    """hpc/train_preemptible.sh on the real SLURM, signalled as its time limit would."""
    reason = slurm_missing_reason()
    if reason:
        pytest.skip(reason)
    sets = ["--set", *[a for a in LONG if a != "--set"]]
    with local_slurm() as slurm:
        env = dict(slurm.env, OMP_NUM_THREADS="1", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        whole = tmp_path / "whole"
        ref = subprocess.run(
            ["srun", "-n", "2", sys.executable, "-m", "neural_arch.cli", "train", *sets, f"run.dir={whole}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            cwd=REPO,
        )
        assert ref.returncode == 0, ref.stdout + ref.stderr
        run = tmp_path / "run"
        job_id = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--time=10",
                f"--output={tmp_path}/job.out",
                str(REPO / "hpc" / "train_preemptible.sh"),
                *sets,
                f"run.dir={run}",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout.strip()
        wait_for_rows(run, 3)
        # What `#SBATCH --signal=USR1@120` does before the time limit: USR1 to every task.
        subprocess.run(["scancel", "--signal=USR1", job_id], env=env, check=True)
        _wait_until_gone(job_id, env)
    log = (tmp_path / "job.out").read_text()
    assert "requeued SLURM job" in log and "restart 1" in log and "resuming from step" in log, log
    assert_params(final_params(run), final_params(whole), atol=0)


def _wait_until_gone(job_id: str, env: dict[str, str], timeout: float = 300) -> None:
    """Until the job has ended for good; a requeued job waits ~2 min (SLURM's hold on its
    begin time): release it early, as the scheduler would when that time comes, but only
    once the node is idle and the requeue is 2 s old. slurmd revokes the old credential at
    the requeue and counts a new one made within the same second as revoked too, so a
    release at once can kill the restart ("Job credential revoked"; a CI failure)."""
    deadline = time.monotonic() + timeout
    pending_since: float | None = None
    while time.monotonic() < deadline:
        show = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=env, capture_output=True, text=True).stdout
        fields = dict(item.split("=", 1) for item in show.split() if "=" in item)
        if fields.get("JobState") in ENDED:
            return
        if fields.get("JobState") == "PENDING" and fields.get("Reason") == "BeginTime":
            pending_since = pending_since or time.monotonic()
            node = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
            if node.strip() == "idle" and time.monotonic() - pending_since >= 2.0:
                subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, capture_output=True)
        time.sleep(0.5)
    raise AssertionError(f"SLURM job {job_id} has not ended after {timeout} s")


ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def _agree_worker(rank: int, world_size: int) -> dict:
    from neural_arch.distributed import init_process_group
    from neural_arch.distributed.runtime import calls
    from neural_arch.training import stop as stop_module

    init_process_group(backend="gloo")
    answers = []
    with stop_module.StopSignals() as stop:
        for call in range(400):
            time.sleep(0.005 if rank == 0 else 0.01)  # rank 1 is the slower: its pace sets the interval
            if rank == 1 and call == 150:
                stop.received = signal.SIGTERM  # as _note does
            answers.append(stop.agreed())
            if answers[-1] is not None:
                break
    result = {"answers": answers, "collectives": calls.progress()[0]}
    # A signal after the last agreement: the forced call (the trainer's last step) still sees it.
    with stop_module.StopSignals() as late:
        forced = []
        for call in range(40):
            if rank == 1 and call == 30:
                late.received = signal.SIGTERM
            forced.append(late.agreed(force=call == 35))
    result["forced"] = forced
    return result


@pytest.mark.timeout(120)
def test_ranks_agree_on_a_stop_at_the_same_step_within_the_check_interval():
    from neural_arch.training.stop import CHECK_SECONDS

    zero, one = run_ranks(_agree_worker, 2)
    # Both ranks see the signal at the same call, after rank 1 received it, and nothing before.
    assert len(zero["answers"]) == len(one["answers"]) > 150
    assert zero["answers"][-1] == one["answers"][-1] == signal.SIGTERM and not any(zero["answers"][:-1])
    # Within one interval of the signal, counted in calls, not timed: rank 1 sleeps at least 10 ms
    # a call, so the interval is at most CHECK_SECONDS / 0.01 calls ...
    assert len(one["answers"]) <= 151 + int(CHECK_SECONDS / 0.01), len(one["answers"])
    # ... and with far fewer collectives than steps (one per call before this change).
    assert zero["collectives"] < len(zero["answers"]) / 5, zero["collectives"]
    # The forced agreement (same call on every rank) reports the late signal on both ranks.
    assert zero["forced"] == one["forced"] and zero["forced"][35] == signal.SIGTERM, zero["forced"]
    assert not any(zero["forced"][:30]), zero["forced"]  # nothing before the signal
