"""A run a callback stopped early, started again, stays stopped (training/finished_run.py).

Run: ``.venv/bin/python -m pytest tests/training/test_early_stop_rerun.py -q`` (about 30 s on two
busy cores: three in-process 1-rank runs of the tiny regression MLP, one ``neural-arch train``).

What must hold: the same ``train(cfg, callbacks=...)`` started again on the directory of a run
stopped early at step 3 of 8 says so in one line and changes nothing (no step trained, the summary
kept); so does ``neural-arch train`` on it; naming the stop's checkpoint (``resume=PATH``, the way
the line gives) trains on to step 8, after which the run is finished as any other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neural_arch.training.callbacks import Callback, StepEvent
from neural_arch.training.config import load_config
from neural_arch.training.finished_run import finished_step
from neural_arch.training.trainer import train
from tests.helpers.cli import cli
from tests.helpers.trainer_runs import copied_run

SETTINGS = [
    "training.steps=8",
    "checkpoint.every_steps=2",
    "logging.every_steps=2",
    "logging.progress=false",
    "logging.tensorboard=false",
]


class StopAt(Callback):
    """Asks to stop at ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step(self, event: StepEvent) -> None:
        if event.step == self.step:
            event.request_stop(f"enough at step {self.step}")


def _cfg(run: Path):
    return load_config("tiny", [*SETTINGS, f"run.dir={run}"])


def _line(run: Path) -> str:
    return (
        "stopped early at step 3 of 8 (enough at step 3); nothing to do (to train on to step 8 anyway, "
        f"resume from its checkpoint by name: --resume {run / 'checkpoints' / 'step_00000003'})"
    )


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("stopped") / "run"
    train(_cfg(run), callbacks=[StopAt(3)])
    return run


@pytest.fixture
def run(stopped, tmp_path) -> Path:
    return copied_run(stopped, tmp_path / "run")


def _steps(run: Path) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").glob("step_*"))


def test_the_same_train_call_again_says_so_and_trains_nothing(run, capsys):
    summary = (run / "summary.json").read_text()
    assert json.loads(summary)["stopped_early_at_step"] == 3
    assert finished_step(_cfg(run), None) == 3
    capsys.readouterr()
    final = train(_cfg(run), callbacks=[StopAt(3)])
    assert capsys.readouterr().out.strip() == _line(run)
    assert _steps(run)[-1] == "step_00000003"
    assert (run / "summary.json").read_text() == summary
    assert final["val/loss"] == json.loads(summary)["val/loss"]


@pytest.mark.timeout(180)
def test_the_command_says_so_in_one_line_and_exits_0(run):
    done = cli("train", "--config", "tiny", "--set", *SETTINGS, f"run.dir={run}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == _line(run)
    assert _steps(run)[-1] == "step_00000003"


def test_naming_its_checkpoint_trains_on_to_the_end(run, capsys):
    train(_cfg(run), resume=str(run / "checkpoints" / "step_00000003"))
    summary = json.loads((run / "summary.json").read_text())
    assert "stopped_early_at_step" not in summary
    assert _steps(run)[-1] == "step_00000008"
    assert finished_step(_cfg(run), None) == 8
