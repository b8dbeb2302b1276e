"""What ``neural-arch train`` says when stopped by a signal is read off the disk: a stop
during loading (or before the first save) must not claim a checkpoint was saved.

Run: ``.venv/bin/python -m pytest tests/cli/test_train_stop_note.py -q``
"""

import torch

from neural_arch.cli.train import newest_step, saved_note
from neural_arch.distributed.checkpoint import save_checkpoint


def test_stop_before_any_save_claims_nothing(tmp_path):
    note = saved_note(tmp_path / "checkpoints", newest_step(tmp_path / "checkpoints"))
    assert note == "no checkpoint was saved; the same command starts from the beginning."


def test_stop_during_load_names_the_old_step(tmp_path):
    save_checkpoint(tmp_path, 4, {"w": torch.ones(1)})
    before = newest_step(tmp_path)  # the launcher started here, then a SIGTERM came while loading
    assert "no new checkpoint was saved; the newest is still step 4" in saved_note(tmp_path, before)


def test_stop_after_a_save_names_the_new_step(tmp_path):
    save_checkpoint(tmp_path, 4, {"w": torch.ones(1)})
    before = newest_step(tmp_path)
    save_checkpoint(tmp_path, 6, {"w": torch.ones(1)})
    assert saved_note(tmp_path, before).startswith("the workers saved a checkpoint at step 6.")
