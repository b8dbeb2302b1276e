"""The sea-ice app's export builder: a training checkpoint -> the U-Net ready for TorchScript.

Used by ``neural-arch export --checkpoint runs/icenet/checkpoints --output icenet.ts`` (through
``IceNetTask.build_export``), then built and run in ``cpp/`` (see cpp/README.md). The exported
module takes raw (unnormalized) inputs [n, C, H, W] and returns class probabilities
[n, leads, 3, H, W]: the normalization the model was trained with travels inside the file.
"""

from __future__ import annotations

from typing import Any

import torch

from neural_arch.apps.icenet.model import IceNetUNet
from neural_arch.export import ExportSpec, NormalizedForecaster, normalization


def build_from_state(state: dict[str, Any]) -> ExportSpec:
    """The U-Net with the checkpoint's weights inside its normalization, and a raw-scale example."""
    config = state.get("config", {})
    model_cfg, data_cfg = config.get("model", {}), config.get("data", {})
    mean, std = normalization(state)
    model = IceNetUNet(
        len(mean),
        leads=int(data_cfg["leads"]),
        widths=tuple(model_cfg["widths"]),
        dropout=float(model_cfg.get("dropout", 0.0)),
    )
    model.load_state_dict(state["model"])
    grid = int(data_cfg["grid"])
    noise = torch.randn(2, len(mean), grid, grid, generator=torch.Generator().manual_seed(0))
    example = noise * std[None, :, None, None] + mean[None, :, None, None]  # raw-scale input
    return ExportSpec(NormalizedForecaster(model, mean, std), example.float())
