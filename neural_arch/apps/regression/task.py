"""The regression app: an MLP fitted by mean squared error to synthetic or file data.

Run: ``neural-arch train --config tiny --nproc-per-node 2`` (``run.task:
regression`` is the default). The smallest complete ``Task``: a template for a new app.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from neural_arch.apps.regression.config import SECTIONS
from neural_arch.apps.regression.data import build_datasets
from neural_arch.apps.regression.model import MLP
from neural_arch.training.builders import PARAM_DTYPES
from neural_arch.training.task import Task


class RegressionTask(Task):
    """Mean squared error regression with an MLP; metrics: validation loss and MAE."""

    SECTIONS = SECTIONS

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.data = build_datasets(cfg.data, cfg.run.seed, PARAM_DTYPES[cfg.training.precision])
        self.train_size, self.val_size = len(self.data.train_x), len(self.data.val_x)

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.cfg.run.seed)  # the same initial weights on every rank
        sizes = self.cfg.model
        model = MLP(
            features=self.data.train_x.shape[1],
            targets=self.data.train_y.shape[1],
            hidden=sizes.hidden,
            depth=sizes.depth,
        )
        return model.to(PARAM_DTYPES[self.cfg.training.precision])

    def batch(self, split: str, ids: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        x, y = (self.data.train_x, self.data.train_y) if split == "train" else (self.data.val_x, self.data.val_y)
        return {"x": x[ids].to(device), "y": y[ids].to(device)}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = model(batch["x"])
        return ((out.to(batch["y"].dtype) - batch["y"]) ** 2).mean(dim=1)

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        err = model(batch["x"]).to(batch["y"].dtype) - batch["y"]
        return (
            torch.stack(
                [
                    (err**2).mean(dim=1).sum(),
                    err.abs().mean(dim=1).sum(),
                    torch.tensor(float(len(err)), dtype=err.dtype, device=err.device),
                ]
            )
            .double()
            .cpu()
        )

    def finalize(self, sums: torch.Tensor) -> dict[str, float]:
        return {"val/loss": float(sums[0] / sums[2]), "val/mae": float(sums[1] / sums[2])}
