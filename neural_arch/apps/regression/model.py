"""A small multi-layer perceptron: ``MLP(features=8, targets=1, hidden=32, depth=2)``.

Try it::

    >>> import torch
    >>> from neural_arch.apps.regression.model import MLP
    >>> MLP()(torch.randn(4, 8)).shape
    torch.Size([4, 1])

The trainer's default model; plain PyTorch with no distributed imports.
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """``depth`` hidden layers of width ``hidden`` with tanh, then a linear head."""

    def __init__(self, features: int = 8, targets: int = 1, hidden: int = 32, depth: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        layers.append(nn.Linear(width, targets))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
