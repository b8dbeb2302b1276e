"""A full disk or a kill never bricks a run: summary files are replaced atomically, a torn
``metrics.jsonl`` line is skipped, a zero-byte ``summary.json`` is written again, and a
checkpoint save that runs out of space says so in one line.

Run: ``.venv/bin/python -m pytest tests/training/test_full_disk.py -q``
The full disk is a file object whose ``write`` raises ENOSPC after some bytes, which is what
``torch.save`` meets on a full filesystem (it then reports ``unexpected pos``).
"""

import errno
import io
import json
import re

import pytest
import torch

from neural_arch.distributed.checkpoint import CheckpointError, save_checkpoint
from neural_arch.training.config import load_config
from neural_arch.training.jsonl import append_row, read_rows
from neural_arch.training.loss_plot import plot_losses
from neural_arch.training.sample_log import append_samples, forget_samples_after
from neural_arch.training.trainer import train
from neural_arch.utils.atomic import commit_file

REAL_SAVE = torch.save


class FillsUp(io.RawIOBase):
    """Writes through to ``target`` until ``room`` bytes are used, then ENOSPC."""

    def __init__(self, target, room):
        self.target, self.room = target, room

    def writable(self):
        return True

    def write(self, data):
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.target.write(data)


def save_on_full_disk(obj, f, *args, **kwargs):
    REAL_SAVE(obj, FillsUp(f, 700), *args, **kwargs)


def test_torch_unexpected_pos_is_reported_as_no_space(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 1, {"w": torch.ones(4)})
    monkeypatch.setattr(torch, "save", save_on_full_disk)
    with pytest.raises(CheckpointError) as raised:
        save_checkpoint(tmp_path, 2, {"w": torch.ones(100_000)})
    assert str(raised.value) == (
        f"could not write checkpoint step 2 to {tmp_path}: no space left on device at {tmp_path}; "
        "the previous checkpoint step 1 is intact"
    )


def test_torn_metrics_line_is_skipped_and_ended(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "train/loss": 0.5}\n{"step": 2, "train/lo')  # killed mid-line
    plot_losses(metrics, tmp_path / "loss.png")  # used to raise JSONDecodeError on every later run
    assert (tmp_path / "loss.png").stat().st_size > 0
    append_row(metrics, {"step": 3, "train/loss": 0.25})
    assert read_rows(metrics) == [{"step": 1, "train/loss": 0.5}, {"step": 3, "train/loss": 0.25}]


def test_torn_sample_log_line_is_skipped(tmp_path):
    (tmp_path / "logs").mkdir()
    append_samples(tmp_path, 0, 1, [4, 5])
    with open(tmp_path / "logs" / "samples_rank_0.jsonl", "a") as f:
        f.write('{"step": 2, "ids": [')
    forget_samples_after(tmp_path, 1)
    assert read_rows(tmp_path / "logs" / "samples_rank_0.jsonl") == [{"step": 1, "ids": [4, 5]}]


@pytest.mark.parametrize("name", ["summary.json", "summary.txt", "loss.png"])
def test_a_summary_file_that_meets_a_full_disk_keeps_its_old_bytes(tmp_path, name):
    # The trainer and plot_losses write these three through commit_file.
    path = tmp_path / name
    path.write_bytes(b"the previous run's")
    with pytest.raises(OSError, match="No space left"):
        commit_file(path, lambda f: FillsUp(f, 5).write(b"x" * 100))
    assert path.read_bytes() == b"the previous run's" and [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("left", [b"", b'{"val/loss": 0.'])
def test_empty_or_torn_summary_does_not_brick_reruns(tmp_path, left):
    overrides = [
        f"run.dir={tmp_path}",
        "training.steps=4",
        "checkpoint.every_steps=4",
        "logging.progress=false",
        "logging.tensorboard=false",
        "training.precision=fp64",
    ]
    first = train(load_config(None, overrides))
    (tmp_path / "summary.json").write_bytes(left)  # what a full disk left of it
    again = train(load_config(None, overrides))  # used to print "nothing to do", then a JSONDecodeError
    assert again == pytest.approx(first)
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["val/loss"] == pytest.approx(first["val/loss"])
    assert not [p for p in tmp_path.iterdir() if re.match(r"\.tmp-", p.name)]
