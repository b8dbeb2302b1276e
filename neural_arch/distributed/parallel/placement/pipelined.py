"""Pipeline layouts (``parallel.pp > 1``): each rank holds some stages, and the pipeline runs the step.

Use: ``PipelinePlacement(stage_view(runner.modules), PipelineForward(runner), dp_rank=...,
dp_size=..., leader=..., min_rows=..., runner=runner, indices=parameter_indices(model))`` with
``runner = build_pipeline(...)`` and ``indices`` read before the stages replace the parameters;
the trainer's ``place_model`` builds it. ``model`` is a view of this rank's stages under the
full model's names, ``plain`` the whole forward over the pipeline (for evaluation). The training
step is the schedule's (``own_step``); the gradient norm adds the pipeline ranks' parts; the
full state is sent to pipeline rank 0 (pipeline_state.py).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Optional

import torch
import torch.distributed as dist
from torch import nn

from neural_arch.distributed.parallel.checkpoint_layout import dcp_savable
from neural_arch.distributed.parallel.pipeline_state import (
    load_pipeline_shards,
    load_pipeline_state,
    pipeline_model_state,
    pipeline_optimizer_state,
    pipeline_shard_state,
    reshard_stages,
)
from neural_arch.distributed.parallel.placement.base import OwnStep, Placement
from neural_arch.distributed.parallel.placement.sharded import load_sharded_weights
from neural_arch.distributed.parallel.step import PipelineRunner
from neural_arch.distributed.runtime.process_group import get_rank


@dataclass
class PipelinePlacement(Placement):
    """This rank's stages (``model``), the whole forward (``plain``) and the schedule that trains them."""

    runner: PipelineRunner = field(kw_only=True)
    """Runs the training step over the stages of every pipeline rank."""
    indices: dict[str, int] = field(kw_only=True)
    """Parameter name -> index in the full model (the checkpoint's optimizer keys)."""

    sharded_by_default: ClassVar[bool] = True
    counts_flops: ClassVar[bool] = False

    @property
    def own_step(self) -> Optional[OwnStep]:
        return OwnStep(self.runner.step, why_unkeyed="a pipeline's schedule splits the batch itself")

    def no_sync(self) -> ContextManager[Any]:
        """Nothing to skip: the schedule accumulates its micro-batches itself (``own_step``)."""
        return contextlib.nullcontext()

    def model_state(self) -> dict[str, torch.Tensor]:
        return pipeline_model_state(self.model, self.runner.group)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return pipeline_optimizer_state(self.model, optimizer, self.runner.group, self.indices)

    def load(self, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optim_state: dict[str, Any]) -> None:
        load_pipeline_state(self.model, optimizer, self.indices, model_state, optim_state)

    def shard_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return dcp_savable(pipeline_shard_state(self.model, optimizer, self.indices))

    def set_shards(self, optimizer: torch.optim.Optimizer, loaded: dict[str, Any]) -> None:
        load_pipeline_shards(self.model, optimizer, self.indices, loaded)

    def load_weights(self, step_dir: Path, state: dict[str, Any]) -> None:
        reshard_stages(self.model)  # this rank's stages hold some of the names
        load_sharded_weights(self.model, step_dir, state)

    def whole_model(self, build: Callable[[], nn.Module]) -> nn.Module:
        """Gathered onto rank 0 (``model_state``) and loaded into a model ``build`` makes there."""
        state = self.model_state()
        whole = build() if get_rank() == 0 else self.plain
        if get_rank() == 0:
            whole.load_state_dict(state)
        return whole

    def norm_parameters(self) -> list[nn.Parameter]:
        """This rank's stages' parameters, each tied tensor once (``reduce_norm`` adds the other ranks')."""
        return list(self.runner.owned_parameters())

    def reduce_norm(self, norm: torch.Tensor) -> torch.Tensor:
        squared = (norm.double() ** 2).reshape(1)  # each pipeline rank holds some stages' gradients
        dist.all_reduce(squared, group=self.runner.group)
        return squared.sqrt()[0].to(norm.dtype)
