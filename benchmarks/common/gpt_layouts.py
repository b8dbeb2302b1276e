"""One GPT training layout on this rank, for memory.py and pipeline.py (not run on its own).

Use, inside an initialised process group of ``case.layout.world_size`` ranks::

    run = build_run(Case("FSDP x2", ParallelLayout(dp_shard=2)), Shape())
    run.step()                      # one Adam step on this rank's share of a fixed global batch
    run.step(around=some_context)   # the same, with a context around the forward (pp == 1)
                                    # or around the whole schedule step (pp > 1)

Built exactly as tests/distributed/parallel/gpt_runs.py builds its layouts: the library's
``build_mesh``, ``parallelize_model`` (TP, then checkpointing, then FSDP2) or
``build_pipeline``, and ``data_parallel_loss`` weighting. "DDP" is torch DDP through
``neural_arch.distributed.DistributedDataParallel`` on a plain model (the mesh only gives
the data-parallel rank), with ``gradient_as_bucket_view=True`` so that the gradients *are*
DDP's communication buckets and counting them counts that memory once.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable, ContextManager, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from neural_arch.apps.gpt.model import GPT, VOCAB
from neural_arch.apps.gpt.parallelize import parallel_plan
from neural_arch.distributed import DistributedDataParallel
from neural_arch.distributed.parallel import (
    ParallelLayout,
    PipelineRunner,
    build_mesh,
    build_pipeline,
    data_parallel_loss,
    dp_rank,
    dp_size,
    parallelize_model,
)


@dataclass(frozen=True)
class Shape:
    """The model and the global batch every layout of one benchmark trains."""

    d_model: int = 128
    layers: int = 8
    heads: int = 4
    context: int = 128
    batch: int = 16
    """Sequences in the global batch; data-parallel ranks take strided shares of it."""


@dataclass(frozen=True)
class Case:
    """A named layout; ``ddp``: torch DDP on a whole model instead of the layout's FSDP."""

    name: str
    layout: ParallelLayout
    ddp: bool = False


@dataclass
class Run:
    """A built layout on this rank: its model parts, optimizer and data share."""

    case: Case
    modules: list[nn.Module]
    """This rank's model parts (whole model, or its pipeline stages): what it holds."""
    checkpointed: list[nn.Module]
    """Blocks whose activations are recomputed in backward (their inputs stay alive instead)."""
    opt: torch.optim.Optimizer
    x: torch.Tensor
    y: torch.Tensor
    global_count: int
    forward: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    pipe: Optional[PipelineRunner] = None

    def step(self, around: Callable[[], ContextManager] = contextlib.nullcontext) -> None:
        """One training step; ``around()`` wraps the forward only, or the whole pipeline step
        (a pipeline interleaves micro-batch forwards and backwards inside one call)."""
        self.opt.zero_grad()
        if self.pipe is not None:
            with around():
                self.pipe.step(self.x, self.y, self.global_count)
        else:
            with around():
                per_sample = sample_loss(self.forward(self.x), self.y)
                loss = data_parallel_loss(per_sample, self.global_count, self.case.layout.dp_size)
            loss.backward()
        self.opt.step()


def sample_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-byte cross-entropy per sample [rows], as the GPT task's loss."""
    nats = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none")
    return nats.view(y.shape).mean(dim=1)


def build_model(shape: Shape) -> GPT:
    torch.manual_seed(0)  # every rank starts from the same weights, as FSDP and TP assume
    return GPT(
        d_model=shape.d_model,
        n_layers=shape.layers,
        n_heads=shape.heads,
        mlp_ratio=4,
        dropout=0.0,
        context=shape.context,
    )


def build_run(case: Case, shape: Shape) -> Run:
    """Build ``case`` on this rank (every rank of the world must call this for the same case)."""
    layout, plan = case.layout, parallel_plan()
    mesh = build_mesh(layout)
    model = build_model(shape)
    windows = torch.randint(0, VOCAB, (shape.batch, shape.context + 1), generator=torch.Generator().manual_seed(1))
    share = windows[dp_rank(mesh) :: dp_size(mesh)]  # the sampler's strided share
    x, y = share[:, :-1].contiguous(), share[:, 1:].contiguous()
    checkpointed = list(plan.blocks(model)) if layout.activation_checkpointing == 1 else []
    if layout.pp > 1:
        capacity = math.ceil(x.shape[0] / layout.microbatches)
        pipe = build_pipeline(model, layout, mesh, plan, sample_loss, capacity)
        return Run(case, pipe.modules, [], torch.optim.Adam(pipe.parameters()), x, y, shape.batch, pipe=pipe)
    if case.ddp:
        assert layout.dp_replicate == layout.world_size and not layout.activation_checkpointing, case
        wrapped = DistributedDataParallel(model, gradient_as_bucket_view=True)
        return Run(case, [model], [], torch.optim.Adam(model.parameters()), x, y, shape.batch, forward=wrapped)
    parallelize_model(model, layout, mesh, plan)
    return Run(case, [model], checkpointed, torch.optim.Adam(model.parameters()), x, y, shape.batch, forward=model)


def time_steps(run: Run, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds per step over ``steps`` steps, all ranks started together (barriers).

    CPU time (this process, all its threads) leaves out the time other processes held the
    core, so on a loaded machine it shows the work a layout does where wall time cannot;
    it also leaves out waiting for peers, so for several ranks it is not the step time.
    """
    dist.barrier()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        run.step()
    cpu = time.process_time() - cpu
    dist.barrier()
    return (time.perf_counter() - wall) / steps, cpu / steps
