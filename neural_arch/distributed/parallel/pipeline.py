"""Pipeline parallelism with ``torch.distributed.pipelining``: ``build_pipeline(...)``.

Use (every rank, ``layout.pp > 1``)::

    pipe = build_pipeline(model, layout, mesh, plan, sample_loss, microbatch_size=4)
    opt = torch.optim.Adam(pipe.parameters())
    loss_sum = pipe.step(x, targets, global_count)   # this dp rank's share; then opt.step()

The model's blocks are cut into ``layout.num_stages`` contiguous ranges (the app's
``plan.split`` or as even as possible); the app's ``plan.stage`` turns each range into a
module whose parameter names equal the full model's. Stages are looped over the pipeline
ranks: stage s runs on pipeline rank s % pp, so interleaved schedules give rank r the
stages r and r + pp, and with pp > 1 the first and the last stage are never on one rank.
Each stage gets the layout's tensor parallelism, activation checkpointing and FSDP over
its own blocks, exactly as a whole model would (``apply_layout``).

Schedules: GPipe, 1F1B, Interleaved 1F1B and Interleaved Zero Bubble (torch's
``ScheduleInterleavedZeroBubble``, which splits each backward into input and weight
gradients to fill the bubble), all with ``scale_grads=False``: the loss is already
weighted by the global batch (see ``step.py``), and torch's default would divide the
gradients by the number of micro-batches once more.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
)

from neural_arch.distributed.parallel.layout import ParallelLayout
from neural_arch.distributed.parallel.plan import ParallelPlan, apply_layout, check_plan
from neural_arch.distributed.parallel.step import PipelineRunner, SampleLoss, TiedParameters

SCHEDULES: dict[str, type] = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved_1f1b": ScheduleInterleaved1F1B,
    "zero_bubble": ScheduleInterleavedZeroBubble,
}


def even_split(n_blocks: int, n_stages: int) -> list[range]:
    """Contiguous block ranges, sizes differing by at most one (earlier stages take the extra)."""
    if not 1 <= n_stages <= n_blocks:
        raise ValueError(f"pipeline: cannot cut {n_blocks} blocks into {n_stages} stages; use 1 to {n_blocks} stages")
    base, extra = divmod(n_blocks, n_stages)
    bounds = [0]
    for s in range(n_stages):
        bounds.append(bounds[-1] + base + (1 if s < extra else 0))
    return [range(bounds[s], bounds[s + 1]) for s in range(n_stages)]


def local_stages(pp_rank: int, layout: ParallelLayout) -> list[int]:
    """Indices of the stages pipeline rank ``pp_rank`` runs (looped placement)."""
    return [pp_rank + k * layout.pp for k in range(layout.stages_per_rank)]


def build_pipeline(
    model: nn.Module,
    layout: ParallelLayout,
    mesh: DeviceMesh,
    plan: Optional[ParallelPlan],
    sample_loss: SampleLoss,
    microbatch_size: int,
    device: Optional[torch.device] = None,
    materialize: Callable[[nn.Module], None] = lambda module: None,
) -> PipelineRunner:
    """This rank's stages of ``model`` with the layout applied, behind a ``PipelineRunner``.

    ``sample_loss(output, targets)`` gives per-sample losses [micro-batch] from the last
    stage's output; ``microbatch_size`` is the fixed number of rows per micro-batch (shares
    are padded up to ``layout.microbatches * microbatch_size``, see ``step.py``).
    ``materialize`` (a deferred build) is called on this rank's stages only: other stages'
    parameters are never allocated here.
    """
    check_plan(plan, layout, model)
    if layout.pp < 2 or plan is None or plan.stage is None:
        raise ValueError(f"build_pipeline: parallel.pp={layout.pp} needs pp >= 2 and an app plan with stages")
    blocks = list(plan.blocks(model))
    split = (plan.split or even_split)(len(blocks), layout.num_stages)
    _check_split(split, len(blocks), layout.num_stages)
    tied = TiedParameters.declare(model, plan.tied)
    pp_rank = mesh["pp"].get_local_rank()
    device = device or torch.device(mesh.device_type)
    stages, modules = [], []
    for s in local_stages(pp_rank, layout):
        module = plan.stage(model, split[s], s == 0, s == layout.num_stages - 1)
        apply_layout(module, layout, mesh, plan, [blocks[i] for i in split[s]], split[s].start, materialize)
        module.to(device)  # only this rank's stages reach the device (the rest stays in host memory, then goes)
        modules.append(module)
        stages.append(PipelineStage(module, s, layout.num_stages, device, group=mesh["pp"].get_group()))
    return PipelineRunner(stages, modules, layout, mesh, sample_loss, microbatch_size, tied, _schedule_factory(layout))


def _schedule_factory(layout: ParallelLayout) -> Callable[[list[PipelineStage], Callable[..., torch.Tensor]], object]:
    cls = SCHEDULES[layout.pp_schedule]

    def make(stages: list[PipelineStage], loss_fn: Callable[..., torch.Tensor]) -> object:
        first = stages if layout.stages_per_rank > 1 else stages[0]
        return cls(first, n_microbatches=layout.microbatches, loss_fn=loss_fn, scale_grads=False)

    return make


def _check_split(split: list[range], n_blocks: int, n_stages: int) -> None:
    covered = [i for r in split for i in r]
    if len(split) != n_stages or covered != list(range(n_blocks)) or any(len(r) == 0 for r in split):
        raise ValueError(
            f"pipeline split {[(r.start, r.stop) for r in split]} must cut blocks 0..{n_blocks - 1} "
            f"into {n_stages} non-empty contiguous ranges in order"
        )
