"""The interface every layout implements: ``Placement``, and what a pipeline-like layout adds, ``OwnStep``.

Use: subclass ``Placement`` (a dataclass: ``model``, ``plain``, ``dp_rank``, ``dp_size``,
``leader``, ``min_rows``), implement its abstract methods and override the defaults that do
not hold for the new layout; the loop, the checkpoints and the report then run on it unchanged.
Checkpoints always hold the *full* model and optimizer state in the single-process format
(parameter order of the plain model), so a run saved on any layout resumes on any other.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Optional

import torch
from torch import nn


@dataclass(frozen=True)
class OwnStep:
    """A layout's own forward/backward schedule over this rank's whole share of a global batch."""

    run: Callable[[Any, Any, int], float]
    """(inputs, targets, global batch size) -> this rank's loss sum; the gradients are those of the
    global batch's mean loss."""
    why_unkeyed: str
    """Why the forward's random ops come from the process's stream, not per sample (keyed_random.py)."""


@dataclass
class Placement(ABC):
    """The model as trained and as evaluated, and which samples this rank sees."""

    model: nn.Module
    """What the training step calls (the DDP wrapper, the parallelized model, a pipeline's stages)."""
    plain: nn.Module
    """What evaluation and the report call: the model without the DDP wrapper, or the whole forward."""
    dp_rank: int
    dp_size: int
    leader: bool
    """True on one rank per data-parallel group: the one whose loss and metric sums count."""
    min_rows: int = 0
    """Rows every forward needs at least (DTensor cannot run on 0 rows: an empty share is padded)."""

    sharded_by_default: ClassVar[bool] = False
    """``checkpoint.format: auto`` saves every rank's own shards (else the gathered full state)."""
    report_on_every_rank: ClassVar[bool] = False
    """A task with ``REPORT_ON_EVERY_RANK`` reports on every rank with ``plain`` (collective forwards),
    so the whole model is never gathered; else rank 0 reports with ``whole_model``."""
    counts_flops: ClassVar[bool] = True
    """The first step's FLOPs can be counted by torch's counter (not under a pipeline's schedule)."""

    @property
    def own_step(self) -> Optional[OwnStep]:
        """The layout's own schedule for the training step; None: the loop runs ``grad_accum_steps``
        micro-batches through ``model`` itself (each padded to ``min_rows``)."""
        return None

    @abstractmethod
    def no_sync(self) -> ContextManager[Any]:
        """Skip the gradient reduction of an accumulation micro-batch (the last one reduces the sum once)."""

    @abstractmethod
    def model_state(self) -> dict[str, torch.Tensor]:
        """The full model state (on rank 0 where it is gathered: the others may get an empty dict)."""

    @abstractmethod
    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The full optimizer state keyed by parameter index, as ``optimizer.state_dict()`` of one process."""

    @abstractmethod
    def load(self, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optim_state: dict[str, Any]) -> None:
        """Load a full state (from a run on any layout) into this placement's model and optimizer."""

    @abstractmethod
    def load_weights(self, step_dir: Path, state: dict[str, Any]) -> None:
        """Load only the model weights of a checkpoint of any layout and format (``run.init_from``);
        every rank. A sharded checkpoint is read shard by shard into this layout (DCP reshards)."""

    @abstractmethod
    def whole_model(self, build: Callable[[], nn.Module]) -> nn.Module:
        """The unsharded model for rank 0's report (call on every rank; ``build`` makes an empty
        single-process model where one is needed to gather into)."""

    def shard_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's part of the model and optimizer state (DTensors where sharded), named as in
        the full model, for a sharded checkpoint (``checkpoint.format: sharded``); nothing gathered."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        from neural_arch.distributed.parallel.checkpoint_layout import dcp_savable

        return dcp_savable(
            {"model": get_model_state_dict(self.plain), "optim": get_optimizer_state_dict(self.plain, optimizer)}
        )

    def load_shards(self, optimizer: torch.optim.Optimizer, step_dir: Path) -> None:
        """Load a sharded checkpoint saved on any layout into this placement (DCP reshards)."""
        from neural_arch.distributed.checkpoint import load_shards

        self.fill_shards(optimizer, lambda target: load_shards(step_dir, target))

    def fill_shards(self, optimizer: torch.optim.Optimizer, fill: Callable[[dict[str, Any]], None]) -> None:
        """Load shards that ``fill`` copies in place into ``shard_state``'s tensors (allocated in this
        run's layout): DCP from a step directory, or a memory snapshot of the same layout."""
        from neural_arch.distributed.parallel.checkpoint_layout import dcp_restore

        target = self.shard_state(optimizer)
        fill(target)
        self.set_shards(optimizer, dcp_restore(target))

    def set_shards(self, optimizer: torch.optim.Optimizer, loaded: dict[str, Any]) -> None:
        """Set what ``shard_state`` described, after DCP filled it, into the model and optimizer."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

        set_model_state_dict(self.plain, loaded["model"])
        set_optimizer_state_dict(self.plain, optimizer, loaded["optim"])

    def evaluation(self) -> ContextManager[None]:
        """Around many no-gradient forwards (validation, the report), on every rank: the layout may
        hold its model ready for them (and says once, on rank 0, where it could not)."""
        return contextlib.nullcontext()

    def compression_state(self) -> Optional[dict[str, Any]]:
        """The gradient-compression state (PowerSGD's error feedback of every rank) for the checkpoint;
        None when there is none. A collective: call on every rank."""
        return None

    def load_compression_state(self, state: Optional[dict[str, Any]]) -> Optional[str]:
        """Continue compression from ``compression_state()``; a one-line note when it restarts instead."""
        return None

    def norm_parameters(self) -> list[nn.Parameter]:
        """The parameters whose gradients make up this rank's part of the gradient norm."""
        return list(self.model.parameters())

    def reduce_norm(self, norm: torch.Tensor) -> torch.Tensor:
        """The whole model's gradient 2-norm from this rank's part, the same on every rank."""
        return norm
