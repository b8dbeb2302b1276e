"""The config's ``parallel:`` section: is it in use, and can it run on this many ranks?

``check_layout`` holds every rule of the ``parallel:`` section of a config, in one place: the
layout's own (``validate`` in distributed/parallel/layout.py, the one function with those, which
``build_mesh`` shares) and the rules that tie it to the rest of the config (the task's plan and
model sizes, what a pipeline needs, compile, DDP compression, CPU offload). config.py's
``validate_config`` is its caller: in the launching process before anything starts, and in each
worker for the world that did start (run_start.py), where it costs nothing more when the world is
the one already checked. ``check_offload_device`` is the one rule that needs the device the run got.
placement.py asks only ``layout_active`` (which model set-up to build).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from neural_arch.distributed.parallel.layout import ParallelLayout, validate, validate_model
from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError


def layout_active(layout: ParallelLayout) -> bool:
    """Whether the ``parallel:`` section asks for anything beyond plain DDP (all defaults)."""
    return layout != ParallelLayout()


def check_layout(cfg: Any, world_size: Optional[int], task: type[Task]) -> Optional[int]:
    """The ranks that share each global batch (``world_size`` without a layout, the layout's
    ``dp_size`` with one), or a one-line ConfigError for a layout that cannot run on
    ``world_size`` ranks (when unknown yet, the layout's own product stands in), that the
    task's model cannot be split into, or that the rest of ``cfg`` cannot run with."""
    layout = cfg.parallel
    if not layout_active(layout):
        return world_size
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
    _check_with_the_rest(layout, cfg)
    return layout.dp_size


def check_offload_device(layout: ParallelLayout, device: torch.device, backend: Optional[str]) -> None:
    """``parallel.cpu_offload`` on a run that computes on ``device`` (known once the process group is joined)."""
    if layout.cpu_offload and device.type != "cuda":
        raise ConfigError(
            f"parallel.cpu_offload=true moves FSDP's shards to host memory on a CUDA run, but this run computes "
            f"on the CPU (backend {backend}), where they are in host memory already; set "
            "parallel.cpu_offload=false"
        )


def _check_with_the_rest(layout: ParallelLayout, cfg: Any) -> None:
    """Settings of other sections that a ``parallel:`` layout rules out."""
    if cfg.ddp.compression != "none":
        raise ConfigError(
            f"ddp.compression={cfg.ddp.compression} with a parallel: layout: compression applies to plain "
            "DDP's gradient all-reduce only; set ddp.compression=none or leave parallel: at its defaults"
        )
    if cfg.training.compile:
        raise ConfigError(
            "training.compile=true with a parallel: layout: compile is supported with plain data "
            "parallelism only; set training.compile=false or leave parallel: at its defaults"
        )
    if layout.cpu_offload and not torch.cuda.is_available():
        raise ConfigError(
            "parallel.cpu_offload=true moves FSDP's shards to host memory on a CUDA run, but this machine has "
            "no CUDA device (on the CPU they are in host memory already); set parallel.cpu_offload=false"
        )


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
