"""A user's CNN with BatchNorm trains exactly on 2 processes, or is refused in one line.

Run: ``.venv/bin/python -m pytest tests/training/test_batch_norm_task.py -q``

``BatchNormTask`` (a conv, a ``BatchNorm2d`` and a linear head on 4x4 images it makes itself,
float64) is trained with ``neural-arch train`` on 1 process, and on 2 with DDP and with FSDP
(``parallel.dp_shard=2``), with a global batch of 4 over 9 samples: shares of 2 rows, then
every epoch's last batch of 1 sample leaves rank 1 with none. Losses, weights and running
statistics must agree within 1e-10. With ``training.grad_accum_steps=2`` no forward sees the
global batch: the run stops at start with one line naming the layer, exit 2 from its workers,
and no restart.
"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from neural_arch.training.task import Task
from tests.helpers.cli import cli
from tests.helpers.paths import REPO
from tests.helpers.run_outputs import assert_params, final_params, metrics

TASK = f"run.task={__name__}:BatchNormTask"
SETTINGS = [
    "training.steps=7",
    "training.global_batch_size=4",
    "training.precision=fp64",
    "optim.lr=0.05",
    "logging.every_steps=1",
    "logging.progress=false",
    "logging.tensorboard=false",
    "checkpoint.every_steps=0",
]


class BatchNormTask(Task):
    """Tell bright from dark noisy 1-channel 4x4 images with a BatchNorm CNN (cross-entropy per
    image; validation: mean cross-entropy and accuracy)."""

    def __init__(self, cfg):
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.run.seed)
        labels = torch.randint(0, 2, (13,), generator=g)
        images = 3.0 + labels.double().view(-1, 1, 1, 1) + torch.randn(13, 1, 4, 4, generator=g, dtype=torch.float64)
        self.data = {"train": (images[:9], labels[:9]), "val": (images[9:], labels[9:])}
        self.train_size, self.val_size = 9, 4

    def build_model(self):
        torch.manual_seed(self.cfg.run.seed)
        return nn.Sequential(
            nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(), nn.Linear(48, 2)
        ).double()

    def batch(self, split, ids, device):
        images, labels = self.data[split]
        return {"images": images[ids].to(device), "labels": labels[ids].to(device)}

    def loss(self, model, batch):
        return F.cross_entropy(model(batch["images"]), batch["labels"], reduction="none")

    def eval_sums(self, model, batch):
        logits = model(batch["images"])
        right = (logits.argmax(1) == batch["labels"]).double().sum()
        total = F.cross_entropy(logits, batch["labels"], reduction="sum")
        return torch.stack([total, right, torch.tensor(float(len(logits)), dtype=torch.float64)])

    def finalize(self, sums):
        return {"val/loss": float(sums[0] / sums[2]), "val/accuracy": float(sums[1] / sums[2])}


def train_cli(run_dir: Path, procs: int, *extra: str, timeout: float = 200):
    return cli(
        "train",
        "--nproc-per-node",
        str(procs),
        "--set",
        TASK,
        f"run.dir={run_dir}",
        *SETTINGS,
        *extra,
        timeout=timeout,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO)},
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(420)
def test_batch_norm_cnn_on_two_processes_equals_one(tmp_path):
    runs = {}
    for name, procs, extra in (("one", 1, []), ("ddp", 2, []), ("fsdp", 2, ["parallel.dp_shard=2"])):
        proc = train_cli(tmp_path / name, procs, *extra)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        runs[name] = tmp_path / name
    one = final_params(runs["one"])
    assert {"1.running_mean", "1.running_var", "1.num_batches_tracked"} <= one.keys()  # torch's names, kept
    assert int(one["1.num_batches_tracked"]) == 7
    reference = [r for r in metrics(runs["one"]) if "train/loss" in r or "val/loss" in r]
    assert len(reference) >= 7
    for name in ("ddp", "fsdp"):
        assert_params(final_params(runs[name]), one, atol=1e-10)
        rows = [r for r in metrics(runs[name]) if "train/loss" in r or "val/loss" in r]
        assert len(rows) == len(reference), name
        for a, b in zip(reference, rows):
            for key in ("train/loss", "val/loss"):
                if key in a:
                    assert abs(a[key] - b[key]) <= 1e-10, (name, key, a, b)


REFUSED = ["training.grad_accum_steps=2"]


def refusal_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "model.1 (BatchNorm2d)" in line]
    assert lines, stderr
    assert "training.grad_accum_steps=2" in lines[0] and "set training.grad_accum_steps=1" in lines[0], lines[0]
    return lines[0]


def test_grad_accumulation_is_refused_in_one_line_on_one_process(tmp_path):
    proc = train_cli(tmp_path / "run", 1, *REFUSED, timeout=100)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [refusal_line(proc.stderr)]
    assert refusal_line(proc.stderr).startswith("neural-arch train: error: model.1 (BatchNorm2d)")


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_grad_accumulation_is_refused_on_two_processes_without_a_restart(tmp_path):
    proc = train_cli(tmp_path / "run", 2, *REFUSED, timeout=100)
    # The workers exit 2; the launcher adds one line (no restart) and exits 2 too.
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout + proc.stderr  # rank 0's line (the launcher's console is stdout), the launcher's
    refusal_line(out)
    assert "not restarted" in proc.stderr and len(out.strip().splitlines()) <= 2, out
    assert "Traceback" not in proc.stderr
