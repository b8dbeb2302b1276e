"""``neural-arch train`` mistakes that used to cost a traceback, restarts or the launcher
itself: one line, exit 2, before any worker starts.

Run: ``.venv/bin/python -m pytest tests/cli/test_train_usage_errors.py -q``
Run in this process (``run_main``): each case stops before training, so nothing is launched.
"""

import os

import pytest
import torch

from neural_arch.cli.train import check_nproc
from neural_arch.distributed.checkpoint import save_checkpoint
from neural_arch.training.config import load_config
from neural_arch.training.init_from import init_weights_from
from neural_arch.training.typed_config import ConfigError
from tests.helpers.cli import run_main


def one_line(capsys, *argv):
    code, out, err = run_main(["train", *argv], capsys)
    assert code == 2, (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("count", ["0", "-1", "1000"])
def test_bad_process_counts_are_refused(tmp_path, capsys, count):
    err = one_line(capsys, "--nproc-per-node", count, "--set", f"run.dir={tmp_path / 'run'}")
    assert (
        "must be a positive integer" in err if count != "1000" else "--nproc-per-node 1000: more processes than" in err
    )
    assert not (tmp_path / "run").exists()  # refused before anything was created


def test_process_limit_is_per_core():
    check_nproc(16, "--nproc-per-node", cores=2)
    with pytest.raises(ConfigError, match=r"17: more processes than this machine can run \(2 cores, at most 16"):
        check_nproc(17, "--nproc-per-node", cores=2)


@pytest.mark.parametrize("nproc", ["1", "2"])
@pytest.mark.parametrize("where", ["file", "under_file"])
def test_run_dir_that_is_or_is_under_a_file(tmp_path, capsys, nproc, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    run = blocker if where == "file" else blocker / "run"
    err = one_line(capsys, "--nproc-per-node", nproc, "--set", f"run.dir={run}", "training.steps=2")
    expected = "it is a file, not a directory" if where == "file" else "a part of its path is a file"
    assert f"run.dir='{run}' cannot be used: {expected}" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only (0555) directory anyway")
def test_read_only_run_dir(tmp_path, capsys):
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o555)
    err = one_line(capsys, "--nproc-per-node", "2", "--set", f"run.dir={parent / 'run'}")
    assert "cannot be used: it is not writable" in err


class _Recorded:
    """Stands in for the components: ``init_weights_from`` only reads the task and loads weights."""

    def __init__(self, task):
        self.task = task
        self.placement = self
        self.loaded = None

    def load_weights(self, step_dir, state):
        self.loaded = step_dir


def test_init_from_a_state_file_means_its_step_directory(tmp_path):
    from neural_arch.training.registry import task_class

    cfg = load_config(None, ["model.hidden=4"])
    task = task_class(cfg.run.task)(cfg)
    with torch.device("meta"):
        weights = {k: torch.zeros(v.shape) for k, v in task.build_model().state_dict().items()}
    save_checkpoint(tmp_path, 3, {"model": weights})
    recorded = _Recorded(task)
    assert init_weights_from(recorded, str(tmp_path / "step_00000003" / "state.pt")) == 3
    assert recorded.loaded == tmp_path / "step_00000003"
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ConfigError, match="is a file, not a checkpoint directory"):
        init_weights_from(recorded, str(tmp_path / "notes.txt"))
