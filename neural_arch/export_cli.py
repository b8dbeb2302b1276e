"""``neural-arch export --checkpoint PATH --output icenet.ts``: TorchScript for the C++ program.

Run: ``neural-arch export --checkpoint runs/icenet/checkpoints --output icenet.ts`` then
build and run ``cpp/`` (see cpp/README.md). The exported module takes raw (unnormalized)
inputs [n, C, H, W] and returns class probabilities [n, leads, 3, H, W]: normalization is
inside. Export checks the saved file against the eager model (max difference <= 1e-5).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional, Sequence

import torch
from torch import nn


def build_from_state(state: dict[str, Any]) -> tuple[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(model with weights, mean, std, example input) from an icenet training checkpoint."""
    from neural_arch.export import normalization
    from neural_arch.models.icenet import IceNetUNet

    config = state.get("config", {})
    model_cfg, data_cfg = config.get("model", {}), config.get("data", {})
    if model_cfg.get("name") != "icenet":
        raise ValueError(f"checkpoint holds model {model_cfg.get('name')!r}; export supports the icenet model.")
    mean, std = normalization(state)
    model = IceNetUNet(len(mean), leads=int(data_cfg["leads"]), widths=tuple(model_cfg["widths"]),
                       dropout=float(model_cfg.get("dropout", 0.0)))
    model.load_state_dict(state["model"])
    grid = int(data_cfg["grid"])
    example = torch.randn(2, len(mean), grid, grid, generator=torch.Generator().manual_seed(0)) * std[None, :, None, None] \
        + mean[None, :, None, None]
    return model, mean, std, example


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="neural-arch export", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a run's checkpoints/ directory or one step_* directory")
    parser.add_argument("--output", required=True, help="TorchScript file to write, e.g. icenet.ts")
    ns = parser.parse_args(argv)
    from neural_arch.export import export_checkpoint

    try:
        diff = export_checkpoint(ns.checkpoint, ns.output, build_from_state)
    except (ValueError, KeyError) as exc:
        print(f"neural-arch export: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {ns.output} (TorchScript vs eager max abs difference {diff:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
