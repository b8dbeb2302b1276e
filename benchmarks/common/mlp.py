"""The communication-bound MLP of the compression and scaling-model studies (not run on its own).

Use: ``model = make_model()``: 64 -> 2048 -> 2048 -> 2048 -> 10, 8.55 M parameters (34.2 MB
of fp32 gradients per step), the same initial weights on every call and every rank.
"""

from __future__ import annotations

import torch
from torch import nn

IN, OUT = 64, 10
"""Input features and classes."""


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(IN, 2048),
        nn.ReLU(),
        nn.Linear(2048, 2048),
        nn.ReLU(),
        nn.Linear(2048, 2048),
        nn.ReLU(),
        nn.Linear(2048, OUT),
    )
