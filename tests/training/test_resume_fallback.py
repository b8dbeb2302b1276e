"""A newest checkpoint that loads but does not fit the run (another model's shapes) is
skipped with one warning naming it and why; the run resumes from the newest older one that fits.

Run: ``.venv/bin/python -m pytest tests/training/test_resume_fallback.py -q``
(The other case, a sharded step whose DCP entry is refused as unsafe, is in
tests/distributed/checkpoint/test_untrusted.py, which has the sharded runs.)
"""

import shutil

import pytest

from neural_arch.training.config import load_config
from neural_arch.training.trainer import train
from neural_arch.training.typed_config import ConfigError


def overrides(run, steps, hidden):
    return [
        f"run.dir={run}",
        f"training.steps={steps}",
        "checkpoint.every_steps=2",
        "checkpoint.keep_last=5",
        f"model.hidden={hidden}",
        "logging.progress=false",
        "logging.tensorboard=false",
        "training.precision=fp64",
    ]


@pytest.mark.timeout(180)
def test_newest_with_other_shapes_falls_back_to_the_older_step(tmp_path, capsys):
    mine, other = tmp_path / "mine", tmp_path / "other"
    train(load_config(None, overrides(mine, 2, hidden=4)))
    train(load_config(None, overrides(other, 4, hidden=8)))
    newest = mine / "checkpoints" / "step_00000004"
    shutil.copytree(other / "checkpoints" / "step_00000004", newest)  # another model's step, newest here
    capsys.readouterr()
    with pytest.warns(RuntimeWarning) as seen:
        train(load_config(None, overrides(mine, 6, hidden=4)))
    said = [str(w.message) for w in seen if "cannot be restored" in str(w.message)]
    assert len(said) == 1 and "\n" not in said[0], said
    assert said[0].startswith(f"checkpoint {newest} cannot be restored into this run (") and "size mismatch" in said[0]
    assert said[0].endswith("; falling back to step 2")
    assert "resuming from step 2 of 6" in capsys.readouterr().out


@pytest.mark.timeout(180)
def test_no_checkpoint_fits_is_one_line(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "other"
    train(load_config(None, overrides(other, 2, hidden=8)))
    shutil.copytree(other / "checkpoints", mine / "checkpoints")
    with pytest.raises(ConfigError) as raised:
        train(load_config(None, overrides(mine, 4, hidden=4)))
    assert "\n" not in str(raised.value) and "no checkpoint in" in str(raised.value)
    assert (mine / "checkpoints" / "step_00000002").is_dir()  # nothing pruned
