"""What an app tells the framework about its model, and applying a layout to a whole model.

Use: an app's ``parallelize.py`` returns a ``ParallelPlan`` (see ``apps/NAME/parallelize.py``);
the trainer then calls ``parallelize_model(model, layout, mesh, plan)`` when ``layout.pp == 1``
or ``build_pipeline(...)`` (pipeline.py) when ``layout.pp > 1``.

Order (torchtitan's): tensor parallelism first (it replaces parameters by DTensor slices),
activation checkpointing next (it wraps forwards), FSDP last (its hooks must see the
final parameters and sit outside the recomputed region).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from neural_arch.distributed.parallel.activation import apply_activation_checkpointing
from neural_arch.distributed.parallel.fsdp import apply_fsdp, needs_fsdp
from neural_arch.distributed.parallel.layout import ParallelLayout, validate_model
from neural_arch.distributed.parallel.tensor import TensorPlan, apply_tensor_parallel

Materialize = Callable[[nn.Module], None]
"""Gives a module's not yet allocated parameters their values (a deferred build, see
``neural_arch.distributed.parallel.deferred_init``); called on each part just before it is sharded."""

StageBuilder = Callable[[nn.Module, range, bool, bool], nn.Module]
"""(full model, block indices, holds the first stage's input part, holds the output part) -> stage module."""


@dataclass
class ParallelPlan:
    """An app's answers to "how can this model be split?"."""

    blocks: Callable[[nn.Module], Sequence[nn.Module]]
    """The model's repeated blocks, in order (FSDP groups, checkpointing, pipeline split units)."""
    tensor_plan: Optional[Callable[[nn.Module], TensorPlan]] = None
    """Column/row-wise styles for a model or a pipeline stage (with its sequence-parallel variant in
    ``TensorPlan.sequence_parallel``, used when ``layout.sequence_parallel``); None: the app has no
    tensor-parallel plan."""
    stage: Optional[StageBuilder] = None
    """Builds one pipeline stage from the full model; None: the app has no pipeline split."""
    split: Optional[Callable[[int, int], list[range]]] = None
    """(blocks, stages) -> each stage's block indices; None: as even as possible."""
    tied: tuple[tuple[str, ...], ...] = ()
    """Groups of parameter names that are one tensor in the model (e.g. embedding and head)."""
    heads: Optional[Callable[[nn.Module], int]] = None
    """The model's attention head count, which tensor parallelism must divide."""
    forward_methods: tuple[str, ...] = ()
    """Methods other than ``forward`` that run the model or a block (e.g. a key/value-cache step):
    FSDP gathers the parameters for them too."""


def check_plan(plan: Optional[ParallelPlan], layout: ParallelLayout, model: nn.Module, app: str = "this app") -> None:
    """One-line ``ValueError`` when the layout asks for a parallelism the app's plan does not offer."""
    if (layout.tp > 1 or layout.pp > 1) and plan is None:
        raise ValueError(
            f"parallel: tp={layout.tp}, pp={layout.pp} need a parallel plan but {app} has none; "
            "use dp_shard/dp_replicate only"
        )
    if plan is None:
        return
    if layout.tp > 1 and plan.tensor_plan is None:
        raise ValueError(f"parallel.tp={layout.tp}: {app} has no tensor-parallel plan; set tp=1")
    if layout.sequence_parallel and plan.tensor_plan is not None and plan.tensor_plan(model).sequence_parallel is None:
        raise ValueError(
            f"parallel.sequence_parallel=true: {app}'s tensor plan has no sequence-parallel styles; "
            "set sequence_parallel=false"
        )
    if layout.pp > 1 and plan.stage is None:
        raise ValueError(f"parallel.pp={layout.pp}: {app} has no pipeline split; set pp=1")
    validate_model(layout, len(plan.blocks(model)), plan.heads(model) if plan.heads else None)


def parallelize_model(
    model: nn.Module,
    layout: ParallelLayout,
    mesh: DeviceMesh,
    plan: Optional[ParallelPlan],
    materialize: Materialize = lambda module: None,
) -> nn.Module:
    """Tensor parallelism, activation checkpointing, then FSDP, each where the layout asks; returns ``model``.

    For ``pp == 1``; a pipeline builds its stages with ``build_pipeline`` (which calls
    ``apply_layout`` per stage).
    """
    check_plan(plan, layout, model)
    if layout.pp > 1:
        raise ValueError(f"parallel.pp={layout.pp}: build the stages with build_pipeline, not parallelize_model")
    if layout.activation_checkpointing and plan is None:
        raise ValueError(
            "parallel.activation_checkpointing needs the model's blocks: pass a ParallelPlan "
            "(resolve_plan(None, model, layout) infers one from a ModuleList of identical blocks); or set it to 0"
        )
    blocks = list(plan.blocks(model)) if plan is not None else []
    return apply_layout(model, layout, mesh, plan, blocks, materialize=materialize)


def apply_layout(
    module: nn.Module,
    layout: ParallelLayout,
    mesh: DeviceMesh,
    plan: Optional[ParallelPlan],
    blocks: Sequence[nn.Module],
    first_block: int = 0,
    materialize: Materialize = lambda module: None,
) -> nn.Module:
    """Apply the layout's tp, checkpointing and FSDP to ``module`` whose blocks are ``blocks``
    (global indices from ``first_block``, which "every k-th block" counts). ``materialize`` is
    called on each submodule just before it is sharded, then on ``module`` for the rest, so a
    deferred build never holds more than one part's full tensors."""
    if layout.tp > 1:
        assert plan is not None and plan.tensor_plan is not None  # check_plan said so
        apply_tensor_parallel(module, mesh, plan.tensor_plan(module), layout.sequence_parallel, materialize)
    if layout.activation_checkpointing:
        apply_activation_checkpointing(blocks, layout.activation_checkpointing, first_block)
    if needs_fsdp(layout):
        methods = plan.forward_methods if plan is not None else ()
        apply_fsdp(module, mesh, layout, blocks, materialize=materialize, forward_methods=methods)
    materialize(module)
    return module
