"""``neural-arch export --format safetensors``: the weights of a full or a sharded checkpoint, and
the model settings that rebuild them.

Run: ``.venv/bin/python -m pytest tests/cli/test_export_safetensors.py -q``
The regression MLP trains 3 steps on 1 process (full checkpoint) and on FSDP x2 (sharded); each
export loads with ``safetensors.torch.load_file`` into a model built from the file's own
metadata and equals the checkpoint's model bitwise. A bad checkpoint path is one line, exit 2.
"""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from neural_arch.apps.regression.model import MLP
from tests.helpers.cli import cli
from tests.helpers.run_outputs import final_params
from tests.helpers.trainer_runs import BASE

pytestmark = pytest.mark.multiprocess  # runs the CLI


@pytest.mark.parametrize(
    "layout", [[], ["--nproc-per-node", "2", "--set", "parallel.dp_shard=2"]], ids=["full", "sharded"]
)
def test_weights_and_settings_round_trip(tmp_path, layout):
    run = tmp_path / "run"
    trained = cli("train", *BASE, "--set", f"run.dir={run}", "training.steps=3", *layout)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    out = tmp_path / "model.safetensors"
    proc = cli("export", "--checkpoint", str(run), "--format", "safetensors", "--output", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with safe_open(str(out), "pt") as f:
        meta = f.metadata()
    assert meta["neural_arch.task"] == "regression"
    settings = json.loads(meta["neural_arch.model"])
    model = MLP(**{k: settings[k] for k in ("hidden", "depth") if k in settings}).double()
    model.load_state_dict(load_file(str(out)))  # strict: every name the model has, nothing else
    want = final_params(run)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, want[name]), name


def test_a_missing_checkpoint_is_one_line(tmp_path):
    proc = cli("export", "--checkpoint", str(tmp_path / "nothing"), "--format", "safetensors", "--output", "x")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
