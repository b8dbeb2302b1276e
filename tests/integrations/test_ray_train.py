"""Ray Train as an engine: a local Ray cluster runs our trainer and a user's script as 2-worker
``TorchTrainer``s; they equal one process, a worker killed once resumes bitwise from our
checkpoint, and our checkpoints are Ray's ``Result.checkpoint``.

Run: ``.venv/bin/python -m pytest tests/integrations/test_ray_train.py -q`` (6 to 7 minutes on
the shared 2-core machine at a load of about 12, most of it Ray starting its processes: one
cluster for the module, three ``fit()``s, one of which restarts its worker group). Skipped when
``ray`` is not installed (``pip install -e '.[ray]'``; the dev extra has it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray Train is the optional extra `neural_arch[ray]` (in the dev extra)")

from ray.train import FailureConfig, Result, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchTrainer  # noqa: E402

from neural_arch.distributed import load_checkpoint  # noqa: E402
from neural_arch.integrations.ray import script_loop_per_worker, train_loop_per_worker  # noqa: E402
from neural_arch.training.config import load_config  # noqa: E402
from neural_arch.training.trainer import train  # noqa: E402
from tests.helpers.ray_runs import USER_SCRIPT, KillOnce, local_ray, regression, run_script_here  # noqa: E402
from tests.helpers.run_outputs import assert_params, final_params  # noqa: E402

pytestmark = [pytest.mark.multiprocess, pytest.mark.machine, pytest.mark.timeout(600)]

STEPS = 12
"""Checkpoints at 4, 8, 12; validation at 6 and 12; 101 samples / 12 per step: an uneven batch at step 9."""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory):
    """One private Ray cluster for the module (starting one costs ~20 s); always shut down."""
    with local_ray(tmp_path_factory.mktemp("ray")) as session_dir:
        yield session_dir


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ray's ``storage_path``: on one machine, every worker sees it."""
    return tmp_path_factory.mktemp("storage")


def fit(storage: Path, name: str, loop, loop_config: dict, max_failures: int = 0) -> Result:
    trainer = TorchTrainer(
        loop,
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            storage_path=str(storage), name=name, failure_config=FailureConfig(max_failures=max_failures)
        ),
    )
    return trainer.fit()


@pytest.fixture(scope="module")
def regression_on_ray(session: Path, storage: Path) -> Result:
    """The regression app on 2 Ray workers, uninterrupted; its run.dir is relative (placed in Ray's)."""
    return fit(storage, "regression", train_loop_per_worker, {"overrides": regression(STEPS)})


def test_regression_app_on_two_ray_workers_equals_one_process(tmp_path, storage, regression_on_ray):
    result = regression_on_ray
    run = storage / "regression" / "runs" / "regression"  # <storage_path>/<name>/<run.dir>
    one = train(load_config(None, regression(STEPS, run_dir=str(tmp_path / "one"))))
    assert_params(final_params(run), final_params(tmp_path / "one"), atol=1e-10)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["processes"] == 2.0
    assert summary["val/loss"] == pytest.approx(one["val/loss"], rel=1e-12)
    # Our checkpoints reach Ray: the last one, copied into Ray's run directory under its own name.
    assert result.error is None
    assert Path(result.checkpoint.path) == storage / "regression" / "step_00000012"
    ours = run / "checkpoints" / "step_00000012"
    assert sorted(p.name for p in Path(result.checkpoint.path).iterdir()) == sorted(p.name for p in ours.iterdir())
    info, state = load_checkpoint(result.checkpoint.path)  # Ray's copy loads like ours
    assert info.step == STEPS
    assert_params(state["model"], final_params(run), atol=0)
    assert result.metrics["step"] == STEPS and result.metrics["checkpoint_step"] == STEPS
    assert result.metrics["val/loss"] == summary["val/loss"]
    assert [Path(c.path).name for c, _ in result.best_checkpoints] == [f"step_{s:08d}" for s in (4, 8, 12)]


def test_user_script_on_two_ray_workers_equals_one_process(tmp_path, session, storage):
    one = tmp_path / "one"
    run_script_here(USER_SCRIPT, str(one), "3")
    out = tmp_path / "ray"
    result = fit(storage, "script", script_loop_per_worker, {"script": str(USER_SCRIPT), "args": [str(out), "3"]})
    assert result.error is None
    losses = json.loads((out / "losses.json").read_text())
    assert losses == pytest.approx(json.loads((one / "losses.json").read_text()), rel=1e-12)
    assert_params(final_params(out), final_params(one), atol=1e-10)
    assert Path(result.checkpoint.path).name == "step_00000002"  # the script's own save_checkpoint
    assert result.metrics["checkpoint_step"] == 2


def test_killed_worker_resumes_from_our_checkpoint_bitwise(tmp_path, session, storage, regression_on_ray):
    marker = tmp_path / "killed"
    config = {"overrides": regression(STEPS), "callbacks": [KillOnce(6, marker)]}
    result = fit(storage, "killed", train_loop_per_worker, config, max_failures=1)
    assert marker.read_text() == "killed after step 6\n"  # the first group lost rank 1 at step 6
    assert result.error is None
    run, reference = storage / "killed" / "runs" / "regression", storage / "regression" / "runs" / "regression"
    log = (run / "logs" / "rank_0.log").read_text()
    assert "resumed from step 4" in log, log
    assert_params(final_params(run), final_params(reference), atol=0)
    want = json.loads((reference / "summary.json").read_text())
    assert json.loads((run / "summary.json").read_text())["val/loss"] == want["val/loss"]
    assert Path(result.checkpoint.path).name == "step_00000012"
    # The survivor said in one line who failed and who restarts (Ray shows it as the group's error).
    errors = "".join(p.read_text(errors="replace") for p in (session / "logs").glob("worker-*.err"))
    assert "rank 0 of 2 stopped because another Ray Train worker of its group is gone" in errors
    assert "Ray Train, not neural_arch, restarts the whole worker group" in errors
