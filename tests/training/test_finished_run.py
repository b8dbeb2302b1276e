"""A finished run is recognised from its directory, before any process starts (finished_run.py).

Run: ``.venv/bin/python -m pytest tests/training/test_finished_run.py``
One tiny 1-process run of 4 steps (module fixture), copied per case: finished at its last
step; not finished when more steps are asked, with ``--resume none``, without a readable
``summary.json``, or when the newest checkpoint is damaged (the workers fall back then).
``neural-arch train --nproc-per-node 2`` on it says so and starts no worker.
"""

from pathlib import Path

import pytest

from neural_arch.training.config import load_config
from neural_arch.training.finished_run import finished_step
from neural_arch.training.trainer import train
from tests.helpers.cli import cli
from tests.helpers.trainer_runs import copied_run

SETTINGS = ["training.steps=4", "checkpoint.every_steps=2", "logging.every_steps=2"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("finished") / "run"
    train(load_config("configs/tiny.yaml", [*SETTINGS, f"run.dir={run}"]))
    return run


@pytest.fixture
def run(finished, tmp_path) -> Path:
    return copied_run(finished, tmp_path / "run")


def _cfg(run: Path, *more: str):
    return load_config("configs/tiny.yaml", [*SETTINGS, f"run.dir={run}", *more])


def test_a_finished_run_is_finished_at_its_last_step(run):
    assert finished_step(_cfg(run), None) == 4
    assert finished_step(_cfg(run), "auto") == 4


@pytest.mark.parametrize(
    "more, resume", [(["training.steps=6"], None), ([], "none"), (["checkpoint.resume=none"], None)]
)
def test_more_steps_or_no_resume_is_work_to_do(run, more, resume):
    assert finished_step(_cfg(run, *more), resume) is None


@pytest.mark.parametrize("summary", [None, b"", b'{"val/loss": 0.'])
def test_a_missing_or_torn_summary_is_left_to_the_trainer(run, summary):
    if summary is None:
        (run / "summary.json").unlink()
    else:
        (run / "summary.json").write_bytes(summary)
    assert finished_step(_cfg(run), None) is None


def test_a_damaged_newest_checkpoint_is_left_to_the_trainer(run):
    state = run / "checkpoints" / "step_00000004" / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    assert finished_step(_cfg(run), None) is None


@pytest.mark.timeout(180)
def test_the_command_starts_no_worker_for_a_finished_run(run):
    args = ["--config", "configs/tiny.yaml", "--set", *SETTINGS, f"run.dir={run}"]
    done = cli("train", *args, "--nproc-per-node", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "already at step 4 of 4; nothing to do (use --resume none or a new run.dir to start over, "
        "or raise training.steps to train on)"
    )
    assert not (run / "logs" / "console").exists()  # the launcher's worker logs: none started
