"""Weights & Biases follows the job: one W&B run per training run, every step logged once, across a
SIGTERM stop and resume and across a rank SIGKILLed and restarted by the launcher; a clear line
when the package is missing.

Run: ``.venv/bin/python -m pytest tests/training/test_wandb.py -q``
The regression MLP with ``logging.wandb=true``, offline (``WANDB_MODE=offline`` in the runs'
environment only, W&B's own folders in the test's temporary directory). Each process that
trained writes one offline piece under ``RUN_DIR/wandb``; read back from those files
(tests/helpers/wandb_files.py): every piece has the run id kept in ``RUN_DIR/wandb_run_id``, the
pieces' history steps, in order, hold each step once, the config is the resolved one and the
finished piece has the outputs as files.
"""

import importlib.util
import json
import sys

import pytest

from neural_arch.distributed.checkpoint import load_checkpoint
from neural_arch.training.components import saved_tracking_ids
from neural_arch.training.config import Config
from neural_arch.training.typed_config import ConfigError
from neural_arch.training.wandb_tracking import WandbTracker, saved_rows
from tests.helpers.cli import run_main
from tests.helpers.long_run import STEPS
from tests.helpers.tracked_runs import KILLED_STEPS, killed_and_restarted, stopped_and_resumed
from tests.helpers.wandb_files import offline_pieces

needs_wandb = pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None, reason="wandb is not installed: pip install 'neural_arch[wandb]'"
)
MISSING = "logging.wandb=true needs Weights & Biases: pip install 'neural_arch[wandb]' (or set logging.wandb=false)"


def offline(tmp_path):
    """The runs' environment: offline, and W&B's settings, cache and data folders kept out of the home directory."""
    folders = {name: str(tmp_path / "wandb_home" / name) for name in ("config", "cache", "data")}
    return {
        "WANDB_MODE": "offline",
        "WANDB_CONFIG_DIR": folders["config"],
        "WANDB_CACHE_DIR": folders["cache"],
        "WANDB_DATA_DIR": folders["data"],
    }


def the_one_run(run_dir):
    """(the offline pieces, every step logged in order) of the run directory's single W&B run."""
    pieces = offline_pieces(run_dir)
    run_id = (run_dir / "wandb_run_id").read_text()
    assert pieces and {p.run_id for p in pieces} == {run_id}, [p.run_id for p in pieces]
    return pieces, [step for p in pieces for step in p.steps]


@needs_wandb
@pytest.mark.multiprocess  # runs the CLI twice
@pytest.mark.timeout(300)
def test_stopped_by_sigterm_and_resumed_is_one_run(tmp_path):
    run = tmp_path / "run"
    stopped_and_resumed(run, "logging.wandb=true", env=offline(tmp_path))
    pieces, steps = the_one_run(run)
    assert len(pieces) == 2 and pieces[0].exit_code == 1 and pieces[1].exit_code == 0  # stopped, then finished
    assert steps == sorted(set(steps)) and steps[-1] == STEPS, steps  # each step once, up to the end
    assert set(range(50, STEPS + 1, 50)) <= set(steps)
    assert pieces[1].config["training"]["steps"] == STEPS
    assert set(pieces[1].files) >= {"summary.txt", "config.yaml", "loss.png"}


@needs_wandb
@pytest.mark.multiprocess  # runs the launcher
@pytest.mark.timeout(300)
def test_a_killed_rank_restarted_by_the_launcher_is_one_run(tmp_path):
    """W&B's service keeps rows in memory for seconds: the killed process's piece may hold none of
    its rows; then steps 1-4 come from metrics.jsonl, and 5-7 are logged as trained again. MLflow
    (where installed) tracks the same run too: the checkpoint names both runs."""
    run, services = tmp_path / "run", ["wandb", "mlflow"] if importlib.util.find_spec("mlflow") else ["wandb"]
    killed_and_restarted(run, *(f"logging.{name}=true" for name in services), env=offline(tmp_path))
    pieces, steps = the_one_run(run)
    assert len(pieces) == 2, pieces
    assert steps == list(range(1, KILLED_STEPS + 1)), steps  # each step once, however many reached the first piece
    found = load_checkpoint(run / "checkpoints")
    assert found is not None
    assert found[1]["tracking_ids"] == {name: (run / f"{name}_run_id").read_text() for name in services}


def test_missing_package_is_one_line_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now fails as if it were not installed
    code, out, err = run_main(["train", "--set", f"run.dir={tmp_path / 'run'}", "logging.wandb=true"], capsys)
    assert code == 2 and err.strip().endswith(MISSING) and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="needs Weights & Biases"):  # the Python API: train(cfg)'s rank 0
        WandbTracker.open(Config(), tmp_path, None, {}, 0)


def test_checkpoints_from_before_wandb_still_name_their_mlflow_run():
    assert saved_tracking_ids({"mlflow_run_id": "abc"}) == {"mlflow": "abc"}
    assert saved_tracking_ids({"mlflow_run_id": None}) == {}
    assert saved_tracking_ids({"tracking_ids": {"mlflow": "a", "wandb": "b"}}) == {"mlflow": "a", "wandb": "b"}


def test_rows_lost_by_a_killed_process_are_found_in_the_metrics_file(tmp_path):
    """After a restart, the rows up to the checkpoint that W&B did not get are logged from metrics.jsonl:
    one row a step, however many attempts and lines wrote it; a line cut short by the kill is left out."""
    metrics = tmp_path / "metrics.jsonl"
    lines = [{"step": s, "train/loss": 1.0 / s, "perf/step_s": 1.0} for s in (1, 2, 3, 4)]  # the killed attempt
    lines += [{"step": 3, "train/loss": 1.0 / 3, "perf/step_s": 2.0}, {"step": 3, "val/loss": 0.5}]  # a restart
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 5, "train/lo')
    assert saved_rows(metrics, 1, 3) == [
        (2, {"train/loss": 0.5, "perf/step_s": 1.0}),
        (3, {"train/loss": 1.0 / 3, "perf/step_s": 2.0, "val/loss": 0.5}),
    ]
    assert saved_rows(metrics, 4, 4) == [] and saved_rows(tmp_path / "none.jsonl", 0, 4) == []
