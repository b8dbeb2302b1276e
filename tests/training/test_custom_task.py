"""An application the framework has never heard of, trained without editing the framework.

Run: ``.venv/bin/python -m pytest tests/training/test_custom_task.py -q``

``ToyTask`` (a linear model on data it makes itself, with config sections of its own) is
defined and registered here. It trains in this process under its registered name, and with
``neural-arch train`` on 2 processes under its import path ``module:Class`` (each worker
imports it); the two runs must end with the same weights (float64, 1e-12).
"""

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from neural_arch.distributed.checkpoint import load_checkpoint
from neural_arch.training.config import load_config
from neural_arch.training.registry import register_task, task_class
from neural_arch.training.task import AppSections, Task
from neural_arch.training.trainer import train
from neural_arch.training.typed_config import ConfigError, at_least
from tests.helpers.cli import cli
from tests.helpers.paths import REPO


@dataclass
class ToyModelConfig:
    bias: bool = True
    """Whether the linear model has a bias."""


@dataclass
class ToyDataConfig:
    samples: int = 40
    """Training samples (validation gets a quarter as many)."""
    features: int = 3
    """Inputs per sample."""


class ToyTask(Task):
    """y = x @ w + 0.5 plus noise, fitted by a linear layer; metric: validation MSE."""

    SECTIONS = AppSections(
        model=ToyModelConfig, data=ToyDataConfig, ranges={"data.samples": at_least(2), "data.features": at_least(1)}
    )

    def __init__(self, cfg):
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.run.seed)
        n, f = cfg.data.samples, cfg.data.features
        x = torch.randn(n + n // 4, f, generator=g, dtype=torch.float64)
        y = (
            x @ torch.arange(1.0, f + 1, dtype=torch.float64)
            + 0.5
            + 0.1 * torch.randn(len(x), generator=g, dtype=torch.float64)
        )
        self.x, self.y = {"train": x[:n], "val": x[n:]}, {"train": y[:n], "val": y[n:]}
        self.train_size, self.val_size = n, len(x) - n

    def build_model(self):
        torch.manual_seed(self.cfg.run.seed)
        return nn.Linear(self.cfg.data.features, 1, bias=self.cfg.model.bias).double()

    def batch(self, split, ids, device):
        return {"x": self.x[split][ids].to(device), "y": self.y[split][ids].to(device)}

    def loss(self, model, batch):
        return (model(batch["x"]).squeeze(1) - batch["y"]) ** 2

    def eval_sums(self, model, batch):
        err = model(batch["x"]).squeeze(1) - batch["y"]
        return torch.stack([(err**2).sum(), torch.tensor(float(len(err)), dtype=torch.float64)])

    def finalize(self, sums):
        return {"val/loss": float(sums[0] / sums[1])}


register_task("toy", ToyTask)

SETTINGS = [
    "training.steps=12",
    "training.global_batch_size=8",
    "optim.lr=0.05",
    "logging.progress=false",
    "logging.tensorboard=false",
    "checkpoint.every_steps=0",
    "data.samples=44",
]


def final_weights(run_dir: Path) -> dict:
    found = load_checkpoint(run_dir / "checkpoints")
    assert found is not None, f"no checkpoint in {run_dir}"
    return found[1]["model"]


def test_registered_task_trains_in_process_and_learns(tmp_path):
    assert task_class("toy") is ToyTask
    cfg = load_config(None, ["run.task=toy", f"run.dir={tmp_path}", *SETTINGS, "training.steps=60"])
    assert cfg.data.samples == 44 and cfg.model.bias is True  # its own sections, typed and defaulted
    first = ToyTask(cfg)
    model = first.build_model()
    with torch.no_grad():
        before = float(
            first.finalize(first.eval_sums(model, first.batch("val", torch.arange(first.val_size), "cpu")))["val/loss"]
        )
    final = train(cfg, resume="none")
    assert final["val/loss"] < 0.1 * before, (before, final)


def test_its_config_sections_are_checked_like_the_frameworks():
    with pytest.raises(ConfigError, match="data.samples=1 is out of range: must be >= 2"):
        load_config(None, ["run.task=toy", "data.samples=1"])
    with pytest.raises(ConfigError, match="unknown key 'model.hidden'"):
        load_config(None, ["run.task=toy", "model.hidden=3"])


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_neural_arch_train_on_two_processes_equals_one(tmp_path):
    """The CLI's workers find the task by its import path; 2 ranks end where 1 does."""
    task = f"run.task={__name__}:ToyTask"
    runs = {}
    for procs in (1, 2):
        run_dir = tmp_path / f"procs{procs}"
        proc = cli(
            "train",
            "--nproc-per-node",
            str(procs),
            "--set",
            task,
            f"run.dir={run_dir}",
            *SETTINGS,
            timeout=200,
            cwd=REPO,
            env={"PYTHONPATH": str(REPO)},
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"on {procs} process(es)" in proc.stdout
        runs[procs] = final_weights(run_dir)
    for name, one in runs[1].items():
        torch.testing.assert_close(runs[2][name], one, rtol=0, atol=1e-12)
    assert not torch.equal(
        runs[1]["weight"], ToyTask(load_config(None, ["run.task=toy", *SETTINGS])).build_model().weight.detach()
    )
