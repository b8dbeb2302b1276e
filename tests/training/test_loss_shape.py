"""A ``Task.loss`` of the wrong shape stops at the first step with one line and exit 2, no restart.

Run: ``.venv/bin/python -m pytest tests/training/test_loss_shape.py -q``

Before the check, a per-token ``[n, k]`` loss trained silently with k times the gradient, and
a scalar (Hugging Face's ``outputs.loss``) died in an obscure ``IndexError`` after a restart.
"""

import pytest
import torch
from torch import nn

from neural_arch.training.task import Task
from tests.helpers.cli import cli
from tests.helpers.paths import REPO

SETTINGS = ["training.steps=3", "training.global_batch_size=8", "logging.progress=false", "logging.tensorboard=false"]


class ToyTask(Task):
    """A linear fit of 24 random samples (its loss per sample is right; the subclasses break it)."""

    def __init__(self, cfg):
        self.cfg = cfg
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(30, 3, generator=g), torch.randn(30, generator=g)
        self.train_size, self.val_size = 24, 6

    def build_model(self):
        torch.manual_seed(0)
        return nn.Linear(3, 1)

    def batch(self, split, ids, device):
        ids = ids + (24 if split == "val" else 0)
        return {"x": self.x[ids].to(device), "y": self.y[ids].to(device)}

    def loss(self, model, batch):
        return (model(batch["x"]).squeeze(1) - batch["y"]) ** 2

    def eval_sums(self, model, batch):
        err = model(batch["x"]).squeeze(1) - batch["y"]
        return torch.stack([(err**2).sum(), torch.tensor(float(len(err)))]).double()

    def finalize(self, sums):
        return {"val/loss": float(sums[0] / sums[1])}


class ScalarLossTask(ToyTask):
    def loss(self, model, batch):
        return super().loss(model, batch).mean()


class PerTokenLossTask(ToyTask):
    def loss(self, model, batch):
        return super().loss(model, batch).unsqueeze(1).expand(-1, 4)


class LongLossTask(ToyTask):
    def loss(self, model, batch):
        per_sample = super().loss(model, batch)
        return torch.cat([per_sample, per_sample[:1]])


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("task", "procs", "said"),
    [  # 2 processes: through the launcher, whose restarts must not be spent on it
        ("ScalarLossTask", 2, "returned shape [] for a micro-batch of 4 samples"),
        ("PerTokenLossTask", 1, "returned shape [8, 4] for a micro-batch of 8 samples"),
        ("LongLossTask", 1, "returned shape [9] for a micro-batch of 8 samples"),
    ],
)
def test_wrong_loss_shape_is_one_line_and_exit_2(tmp_path, task, procs, said):
    proc = cli(
        "train",
        "--nproc-per-node",
        str(procs),
        "--set",
        f"run.task={__name__}:{task}",
        f"run.dir={tmp_path / 'run'}",
        *SETTINGS,
        timeout=200,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    lines = [line for line in out.splitlines() if said in line]
    assert lines and f"one loss per sample, shape [{8 // procs}]" in lines[0], out[-3000:]
    # Rank 0's line (if it printed before the launcher stopped it), then the launcher's one line
    # saying it did not restart (quoting the message when rank 0's console did not show it).
    assert len(out.strip().splitlines()) <= procs and "Traceback" not in out, out[-3000:]
    assert procs == 1 or "not restarted" in out, out[-3000:]
