"""torchx runs our ``trainer`` component for real: with the ``local_cwd`` scheduler from Python (1 node
x 2 processes) and from the ``torchx run`` command (2 nodes x 1 process, our launcher on each), equal
to one process within 1e-10 (float64); a rank killed once is restarted by our launcher and the run
still ends equal; a failing run is FAILED with our one-line reason in its log; and with the ``slurm``
scheduler on a real single-node SLURM where one can be started (skipped otherwise, with the reason).

Run: ``.venv/bin/python -m pytest tests/integrations/test_torchx.py -q`` (about 3.5 minutes on the
shared 2-core machine at a load of 12, SLURM included; 149 s without the killed-rank run, which
takes 66 s: each run is a tiny float64 MLP, most of the time is Python and torch starting).
Skipped when torchx is not installed (``pip install -e '.[torchx]'``; the dev extra has it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("torchx", reason="torchx is the optional extra `neural_arch[torchx]` (in the dev extra)")

from torchx.runner import get_runner  # noqa: E402
from torchx.specs import AppDef, AppState  # noqa: E402
from torchx.specs.builders import materialize_appdef  # noqa: E402

from neural_arch.apps.regression.task import RegressionTask  # noqa: E402
from neural_arch.integrations.torchx import trainer  # noqa: E402
from neural_arch.training.config import load_config  # noqa: E402
from neural_arch.training.trainer import train  # noqa: E402
from neural_arch.utils.ports import free_port  # noqa: E402
from tests.helpers.clusters import local_slurm, slurm_missing_reason  # noqa: E402
from tests.helpers.paths import REPO  # noqa: E402
from tests.helpers.run_outputs import assert_params, final_params  # noqa: E402
from tests.helpers.trainer_runs import BASE  # noqa: E402

pytestmark = [pytest.mark.multiprocess, pytest.mark.machine, pytest.mark.timeout(300)]

STEPS = 10
"""101 samples / 12 per step: step 9 is the epoch's uneven 5-sample batch; checkpoints at 4, 8, 10."""
TOL = 1e-10
"""float64: 2 processes differ from 1 only in summation order."""


def overrides(run: Path) -> list[str]:
    """The regression MLP of tests/helpers/trainer_runs.py in float64, as component arguments."""
    return [*(a for a in BASE if a != "--set"), f"training.steps={STEPS}", f"run.dir={run}"]


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: the same run in this process (world size 1)."""
    run = tmp_path_factory.mktemp("one")
    train(load_config(None, overrides(run)))
    return run


@pytest.fixture(autouse=True)
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the component runs, ``neural-arch``, from this interpreter's environment; one thread a rank."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def run_app(app: AppDef, scheduler: str, cfg: dict[str, str]) -> tuple[AppState, str]:
    """Submit ``app`` with torchx's runner, wait for it, return its final state and its log."""
    with get_runner() as runner:
        handle = runner.run(app, scheduler=scheduler, cfg=cfg)
        status = runner.wait(handle, wait_interval=1)
        assert status is not None, f"torchx lost {handle}"
        log = "\n".join(runner.log_lines(handle, "trainer", k=0))
    return status.state, log


def assert_equals_one(run: Path, one: Path, processes: int) -> None:
    assert_params(final_params(run), final_params(one), atol=TOL)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["processes"] == processes
    assert summary["val/loss"] == pytest.approx(json.loads((one / "summary.json").read_text())["val/loss"], rel=1e-12)


def test_local_cwd_two_processes_equal_one_process(tmp_path, one):
    run = tmp_path / "run"
    state, log = run_app(trainer(*overrides(run), j="1x2"), "local_cwd", {"log_dir": str(tmp_path / "torchx")})
    assert state == AppState.SUCCEEDED, log
    assert_equals_one(run, one, 2)


def test_torchx_run_command_on_two_nodes_equals_one_process(tmp_path, one):
    """``torchx run`` as a user types it; 2 replicas are 2 nodes, each our launcher, meeting over c10d."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torchx.cli.main", "run", "--scheduler", "local_cwd"]
    cmd += ["--scheduler_args", f"log_dir={tmp_path / 'torchx'}", "neural_arch.integrations.torchx:trainer"]
    cmd += ["-j", "2x1", "--rdzv_port", str(free_port()), *overrides(run)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "job finished: SUCCEEDED" in done.stderr, done.stderr
    assert_equals_one(run, one, 2)


def test_a_failing_run_is_failed_with_our_reason_in_its_log(tmp_path):
    app = trainer(*overrides(tmp_path / "run"), "training.stepz=3", j="1x2")
    state, log = run_app(app, "local_cwd", {"log_dir": str(tmp_path / "torchx")})
    assert state == AppState.FAILED
    assert "neural-arch train: error: unknown key 'training.stepz' (did you mean 'training.steps'?)" in log, log


KILL_AT = 7
"""Rank 1 dies in step 7, after the checkpoint of step 4."""


class KillOnceTask(RegressionTask):
    """The regression task, but rank 1 SIGKILLs itself in step ``KILL_AT``'s loss, the first time only
    (a marker in run.dir remembers); workers import it as ``run.task=tests.integrations.test_torchx:KillOnceTask``."""

    losses = 0

    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        KillOnceTask.losses += 1  # one micro-batch a step: the loss of step N is this process's Nth
        marker = Path(self.cfg.run.dir) / "killed-once"
        if KillOnceTask.losses == KILL_AT and dist.get_rank() == 1 and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().loss(model, batch)


def test_a_rank_killed_once_is_restarted_by_our_launcher_and_ends_equal(tmp_path, one, monkeypatch):
    """The reason the component runs our launcher: it restarts the group, which resumes from step 4."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the workers import KillOnceTask from this file
    run = tmp_path / "run"
    app = trainer(*overrides(run), f"run.task={__name__}:KillOnceTask", j="1x2", max_restarts=1)
    state, log = run_app(app, "local_cwd", {"log_dir": str(tmp_path / "torchx")})
    assert state == AppState.SUCCEEDED, log
    assert (run / "killed-once").exists() and "resuming from step 4" in log, log
    assert_equals_one(run, one, 2)


def test_torchx_command_line_options_reach_our_launcher():
    """What ``torchx run ... trainer --max_restarts 1 --create_data True`` builds (torchx parses the signature)."""
    one = materialize_appdef(trainer, ["-j", "1x4", "--max_restarts", "1", "--create_data", "True", "optim.lr=0.1"])
    role = one.roles[0]
    assert (role.entrypoint, role.num_replicas) == ("neural-arch", 1)
    assert role.args == [
        "train",
        "--nproc-per-node",
        "4",
        "--create-data",
        "--set",
        "optim.lr=0.1",
        "--set",
        "training.max_restarts=1",
    ]
    many = materialize_appdef(trainer, ["-j", "2x4", "--max_restarts", "1", "--config", "tiny"]).roles[0]
    assert (many.entrypoint, many.num_replicas, many.args[0]) == ("bash", 2, "-c")
    assert "neural-arch launch --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d" in many.args[1]
    assert "--max-restarts 1" in many.args[1] and many.args[1].endswith("-m neural_arch.cli train --config tiny")


def test_a_bad_topology_is_one_line():
    with pytest.raises(ValueError, match=r"j='2' must be NNODESxNPROC with positive integers, e\.g\. -j 1x2"):
        trainer(j="2")


def wait_for_slurm_job(job_id: str, env: dict[str, str], timeout: float = 240) -> str:
    """``scontrol``'s ``JobState=... ExitCode=...`` of the job once it has ended.

    Not torchx's ``wait``: its SLURM status reads ``squeue --json -j ID``, which Debian 12's
    SLURM 22.05 answers with every job and, for a pending one, without ``job_resources`` (a
    KeyError in torchx), then falls back to ``sacct``, which needs accounting (slurmdbd)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=env, capture_output=True, text=True)
        fields = dict(f.split("=", 1) for f in shown.stdout.split() if "=" in f)
        if fields.get("JobState") in ENDED:
            return f"JobState={fields['JobState']} ExitCode={fields['ExitCode']}"
        time.sleep(1)
    raise AssertionError(f"SLURM job {job_id} still not ended after {timeout:.0f} s")


ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


@pytest.mark.timeout(420)
def test_slurm_scheduler_two_processes_equal_one_process(tmp_path, one, monkeypatch):
    """torchx's ``slurm`` scheduler submits the component with ``sbatch`` to a real local SLURM."""
    reason = slurm_missing_reason()
    if reason:
        pytest.skip(reason)
    run, job_dir = tmp_path / "run", tmp_path / "job"
    monkeypatch.chdir(tmp_path)  # torchx writes .torchxslurmjobdirs in the current directory
    with local_slurm() as slurm:
        monkeypatch.setenv("SLURM_CONF", str(slurm.conf))  # for torchx's sbatch
        with get_runner() as runner:
            handle = runner.run(
                trainer(*overrides(run), j="1x2", memMB=1000), scheduler="slurm", cfg={"job_dir": str(job_dir)}
            )
        job_id = handle.rpartition("/")[2]
        try:
            ended = wait_for_slurm_job(job_id, slurm.env)
        finally:  # never leave a job in the shared SLURM state for the next test to meet
            subprocess.run(["scancel", job_id], env=slurm.env, capture_output=True)
    log = "".join(p.read_text() for p in sorted(job_dir.glob(f"slurm-{job_id}-trainer-0.*")))
    assert ended == "JobState=COMPLETED ExitCode=0:0", log
    assert "finished in" in log and "on 2 process(es)" in log, log
    assert_equals_one(run, one, 2)
