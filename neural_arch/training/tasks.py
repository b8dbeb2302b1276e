"""What the training loop needs to know about a problem: data, model, loss, metrics.

Used by trainer.py: ``task = build_task(cfg)``. Two tasks exist: ``RegressionTask`` (an MLP
on synthetic or file data) and ``IceNetTask`` (the sea-ice forecaster, task_icenet.py).

Contract that keeps training exact on any number of ranks: ``loss`` returns one loss per
sample (the loop weights them by the global batch size), ``eval_sums`` returns float64
*sums* over the given samples (the loop adds them over ranks with one all_reduce and calls
``finalize`` on the totals), and nothing a sample produces depends on the other samples
in its batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from neural_arch.training.builders import build_datasets, build_model
from neural_arch.training.config import Config


class Task:
    """Base class: override everything; ``prepare``, ``state_dict`` and ``report`` are optional."""

    train_size: int
    val_size: int

    def prepare(self) -> None:
        """Collective set-up on every rank after the process group exists (e.g. normalization)."""

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def batch(self, split: str, ids: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        """Samples ``ids`` of ``split`` ("train"/"val"), ready for the model, on ``device``."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-sample training loss, shape [n]."""
        raise NotImplementedError

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """float64 vector of sums over the batch's samples (added over ranks by the loop)."""
        raise NotImplementedError

    def finalize(self, sums: torch.Tensor) -> dict[str, float]:
        """Validation metrics from the global sums."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Task state to keep in checkpoints (e.g. normalization statistics)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()`` from a checkpoint."""

    def report(self, run_dir: Path, model: nn.Module, final: dict[str, float], throughput: dict[str, float]) -> None:
        """Rank 0, after training: write task-specific outputs (plots, report.md)."""


class RegressionTask(Task):
    """Mean squared error regression with an MLP; metrics: validation loss and MAE."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.data = build_datasets(cfg)
        self.train_size, self.val_size = len(self.data.train_x), len(self.data.val_x)

    def build_model(self) -> nn.Module:
        return build_model(self.cfg, self.data)

    def batch(self, split: str, ids: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        x, y = (self.data.train_x, self.data.train_y) if split == "train" else (self.data.val_x, self.data.val_y)
        return {"x": x[ids].to(device), "y": y[ids].to(device)}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = model(batch["x"])
        return ((out.to(batch["y"].dtype) - batch["y"]) ** 2).mean(dim=1)

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        err = model(batch["x"]).to(batch["y"].dtype) - batch["y"]
        return torch.stack([(err**2).mean(dim=1).sum(), err.abs().mean(dim=1).sum(),
                            torch.tensor(float(len(err)), dtype=err.dtype, device=err.device)]).double().cpu()

    def finalize(self, sums: torch.Tensor) -> dict[str, float]:
        return {"val/loss": float(sums[0] / sums[2]), "val/mae": float(sums[1] / sums[2])}


def build_task(cfg: Config) -> Task:
    """The task for ``model.name`` / ``data.name``."""
    if cfg.model.name == "icenet":
        from neural_arch.training.task_icenet import IceNetTask

        return IceNetTask(cfg)
    return RegressionTask(cfg)
