"""training.compile: torch.compile of the model's repeated blocks, within float32 rounding of eager.

Run: ``.venv/bin/python -m pytest tests/training/test_compile.py -q``
The tiny regression MLP (no ModuleList: compiled whole) trained compiled on 2 gloo ranks under
our DDP wrapper against eager on one process (compiling is slow on 2 cores). Tolerance
(README, training.compile): float32 losses and weights within 1e-5 relative / 1e-6 absolute
after the same steps (measured for compiled vs eager on one process: losses 1.5e-7 relative,
weights 3.0e-8 absolute after 6 steps).
"""

import numpy as np
import pytest
import torch
from torch import nn

from neural_arch.training.builders import compile_blocks
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train
from neural_arch.training.typed_config import ConfigError
from tests.helpers.cli import cli
from tests.helpers.run_outputs import final_params, metrics


def test_compile_blocks_picks_the_outermost_module_lists_in_place():
    inner = nn.ModuleList([nn.Linear(2, 2)])
    model = nn.Sequential(nn.Linear(2, 2), nn.ModuleList([nn.Sequential(nn.Linear(2, 2), inner), nn.Linear(2, 2)]))
    names = list(model.state_dict())
    assert compile_blocks(model) == 2  # the two items of the outer list; the list inside the first compiles with it
    assert list(model.state_dict()) == names  # in place: checkpoints keep the eager names
    assert compile_blocks(nn.Linear(2, 2)) == 1  # no list: the whole model


def test_compile_with_a_parallel_layout_is_one_line():
    with pytest.raises(ConfigError, match="training.compile=true with a parallel: layout"):
        load_config(None, ["training.compile=true", "parallel.dp_shard=2"], world_size=2)


@pytest.mark.multiprocess
@pytest.mark.timeout(900)  # inductor compiles C++ on each rank: minutes on 2 busy cores with a cold cache
def test_compiled_run_on_2_ranks_matches_eager_on_one(tmp_path):
    # compiled blocks under our DDP wrapper (2 gloo ranks) against the eager single process
    base = [
        "training.steps=6",
        "training.global_batch_size=8",
        "data.num_samples=48",
        "data.val_samples=8",
        "model.hidden=8",
        "training.precision=fp32",
        "logging.every_steps=1",
        "logging.progress=false",
        "logging.tensorboard=false",
        "checkpoint.every_steps=0",
    ]
    train(load_config(None, [*base, f"run.dir={tmp_path / 'eager'}"]))
    sets = (arg for o in [*base, f"run.dir={tmp_path / 'compiled'}", "training.compile=true"] for arg in ("--set", o))
    proc = cli("train", *sets, "--nproc-per-node", "2", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    losses = {
        mode: [row["train/loss"] for row in metrics(tmp_path / mode) if "train/loss" in row]
        for mode in ("eager", "compiled")
    }
    assert len(losses["eager"]) == 6
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=1e-5, atol=1e-6)
    eager, compiled = final_params(tmp_path / "eager"), final_params(tmp_path / "compiled")
    assert eager.keys() == compiled.keys()  # compiled in place: the eager names
    for key in eager:
        assert eager[key].dtype == torch.float32
        np.testing.assert_allclose(compiled[key].numpy(), eager[key].numpy(), rtol=1e-5, atol=1e-6, err_msg=key)
