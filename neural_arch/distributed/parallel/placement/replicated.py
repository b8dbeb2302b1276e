"""Data parallelism: every rank holds the whole model inside torch's DDP wrapper.

Use: ``ReplicatedPlacement(ddp, model, dp_rank=rank, dp_size=world, leader=True)`` with
``ddp = DistributedDataParallel(model, ...)``; the trainer's ``place_model`` builds it when the
config has no ``parallel:`` layout. Its state is the plain model's ``state_dict()`` and the
optimizer's own, so checkpoints are those of one process without any gathering.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

import torch
from torch import nn

from neural_arch.distributed.data_parallel.ddp import DistributedDataParallel
from neural_arch.distributed.parallel.placement.base import Placement


@dataclass
class ReplicatedPlacement(Placement):
    """The whole model on every rank; ``model`` is its DDP wrapper, ``plain`` the model itself."""

    model: DistributedDataParallel

    def no_sync(self) -> ContextManager[Any]:
        """DDP's ``no_sync``: the next backward outside it all-reduces the accumulated sum once."""
        return self.model.no_sync()

    def model_state(self) -> dict[str, torch.Tensor]:
        return self.plain.state_dict()

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer.state_dict()

    def load(self, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optim_state: dict[str, Any]) -> None:
        self.plain.load_state_dict(model_state)
        optimizer.load_state_dict(optim_state)

    def load_weights(self, step_dir: Path, state: dict[str, Any]) -> None:
        from neural_arch.distributed.checkpoint import has_shards, load_shards

        if has_shards(state):
            load_shards(step_dir, {"model": self.plain.state_dict()})  # filled in place
        else:
            self.plain.load_state_dict(state["model"])

    def whole_model(self, build: Callable[[], nn.Module]) -> nn.Module:
        return self.plain  # every rank holds it: nothing to build or gather

    def compression_state(self) -> Optional[dict[str, Any]]:
        return self.model.compression_state()

    def load_compression_state(self, state: Optional[dict[str, Any]]) -> Optional[str]:
        return self.model.load_compression_state(state)
