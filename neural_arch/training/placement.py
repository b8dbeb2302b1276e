"""Where the model lives: the one place that picks the layout class for a config.

Used by components.py: ``placement = place_model(task, cfg, device)`` returns a
``neural_arch.distributed.parallel.Placement``: ``ReplicatedPlacement`` (DDP over every rank)
without a ``parallel:`` layout, ``ShardedPlacement`` (FSDP2, tensor parallel) or
``PipelinePlacement`` (``pp > 1``) with one. The loop then asks the placement what to do (train
``placement.model``, evaluate ``placement.plain``, give the sampler ``dp_rank``/``dp_size``, ...),
never which layout it is: a new layout is one new class there and one branch here.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

import neural_arch.distributed as nd
from neural_arch.distributed import parallel as par
from neural_arch.distributed.parallel.placement.base import Placement
from neural_arch.training.batch_coupling import exact_batch_coupling
from neural_arch.training.config import Config
from neural_arch.training.layout_check import layout_active
from neural_arch.training.lazy_dynamo import ddp_without_compiler
from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError


def place_model(task: Task, cfg: Config, device: torch.device) -> Placement:
    """DDP over every rank, or the config's ``parallel:`` layout applied to the task's model.

    DDP builds the model in host memory and moves it to ``device``. A sharded layout builds it
    deferred (``deferred_init``: no parameter allocated, the random stream consumed as by a plain
    build) and allocates each part just before sharding it: FSDP one block at a time, tensor
    parallelism one planned submodule at a time, a pipeline only this rank's stages. So neither
    host nor device ever holds the whole model, and the initial weights are bitwise one process's."""
    if not layout_active(cfg.parallel):
        return _replicated(task, cfg, device)
    layout = cfg.parallel  # checked for this world by validate_config (run_start.py); build_mesh reuses that check
    model, materialize = _build_deferred(task)
    exact_batch_coupling(model, cfg, layout)
    mesh = par.build_mesh(layout, device_type=device.type)
    where = dict(
        dp_rank=par.dp_rank(mesh),
        dp_size=par.dp_size(mesh),
        leader=par.is_dp_leader(mesh),
        min_rows=1 if layout.tp > 1 else 0,
    )
    if layout.pp == 1:
        try:  # the task's plan, else one read off the model's block list; a refusal is a user error (exit 2)
            plan = par.resolve_plan(type(task).parallel_plan(), model, layout)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        par.parallelize_model(model, layout, mesh, plan, materialize)
        model.to(device)  # what no plan placed (e.g. buffers); the sharded parameters are there already
        return par.ShardedPlacement(model, model, **where, gather_for_eval=layout.gather_for_eval)
    from neural_arch.distributed.parallel.pipeline_state import parameter_indices

    indices = parameter_indices(model)  # before the stages replace parameters by shards
    # Fixed micro-batch rows: a full global batch's share fills the micro-batches exactly.
    rows = math.ceil(
        cfg.training.global_batch_size / layout.dp_size / (layout.microbatches or 1)
    )  # resolved to a count in ParallelLayout.__post_init__
    plan = type(task).parallel_plan()
    runner = par.build_pipeline(model, layout, mesh, plan, task.sample_loss, rows, device, materialize)
    view, whole = par.stage_view(runner.modules), par.PipelineForward(runner)
    return par.PipelinePlacement(view, whole, **where, runner=runner, indices=indices)


def _replicated(task: Task, cfg: Config, device: torch.device) -> Placement:
    """The task's model in host memory, moved to ``device`` and wrapped in DDP."""
    model = task.build_model().to(device)
    exact_batch_coupling(model, cfg)
    compression = cfg.ddp if cfg.ddp.compression != "none" else None
    # Gradients as views of DDP's buckets: the averaged bucket is the gradient, with no copy
    # back (a model-sized copy every step) and one gradient-sized buffer less. The values are
    # those of copying: the step sets gradients to None, so DDP scales each into its bucket.
    with ddp_without_compiler():  # torch's DDP reads one compiler setting: not worth importing it (lazy_dynamo.py)
        ddp = nd.DistributedDataParallel(
            model, bucket_size_mb=cfg.ddp.bucket_mb, compression=compression, gradient_as_bucket_view=True
        )
    return par.ReplicatedPlacement(ddp, model, nd.get_rank(), nd.get_world_size(), leader=True)


def _build_deferred(task: Task) -> tuple[nn.Module, Callable[[nn.Module], None]]:
    """The task's model, deferred; a plain build (and a note saying why) where the model's
    construction writes deferred tensors in a way that cannot be replayed."""
    from neural_arch.distributed.parallel.deferred_init import build_deferred

    rng = torch.get_rng_state()
    try:
        return build_deferred(task.build_model)
    except NotImplementedError as why:
        torch.set_rng_state(rng)  # the plain build starts from the same stream
        if nd.get_rank() == 0:
            print(f"note: the whole model is built on every rank before sharding ({why})", flush=True)
        return task.build_model(), lambda module: None
