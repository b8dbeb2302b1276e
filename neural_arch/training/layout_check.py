"""The config's ``parallel:`` section: is it in use, and can it run on this many ranks?

Used by config.py (validation) and placement.py (which model set-up to build).
"""

from __future__ import annotations

from typing import Any, Optional

from neural_arch.distributed.parallel.layout import ParallelLayout, validate, validate_model
from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError


def layout_active(layout: ParallelLayout) -> bool:
    """Whether the ``parallel:`` section asks for anything beyond plain DDP (all defaults)."""
    return layout != ParallelLayout()


def checked_layout(layout: ParallelLayout, world_size: Optional[int], task: type[Task], cfg: Any) -> int:
    """The layout's data-parallel size, or a one-line ConfigError for a layout that cannot run
    (on ``world_size`` ranks; when unknown yet, the layout's own product stands in) or that
    the task's model cannot be split into."""
    try:
        validate(layout, layout.world_size if world_size is None else world_size)
        # Activation checkpointing alone may do without the app's plan: the ranks infer one from
        # the model's block list (inferred_plan.py) or refuse in one line once they have the model.
        needs_plan = layout.tp > 1 or layout.pp > 1
        plan = task.parallel_plan()
        if needs_plan and plan is None:
            raise ValueError(
                f"parallel: tp={layout.tp}, pp={layout.pp} need the app's parallel plan but run.task="
                f"{cfg.run.task!r} has none; use dp_shard/dp_replicate (and activation_checkpointing) only"
            )
        if plan is not None and (needs_plan or layout.activation_checkpointing > 0):
            validate_model(layout, *task.parallel_sizes(cfg))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if layout.pp > 1:
        _check_pipeline(layout, task, cfg)
    return layout.dp_size


def _check_pipeline(layout: ParallelLayout, task: type[Task], cfg: Any) -> None:
    """What a pipeline needs beyond the layout: a loss split at the model's output, no second accumulation."""
    if not task.splits_loss():
        raise ConfigError(
            f"parallel.pp={layout.pp} needs the app's loss split at the model's output "
            f"(Task.split_batch and Task.sample_loss) but run.task={cfg.run.task!r} does not; set pp=1"
        )
    if cfg.training.grad_accum_steps != 1:
        raise ConfigError(
            f"training.grad_accum_steps={cfg.training.grad_accum_steps} with parallel.pp={layout.pp}: "
            "a pipeline already accumulates over parallel.microbatches; set grad_accum_steps=1"
        )
    if cfg.training.precision == "fp16":
        raise ConfigError(
            f"training.precision=fp16 with parallel.pp={layout.pp}: the fp16 loss scaler cannot "
            "reach the losses inside the pipeline schedule; use bf16 or fp32"
        )
