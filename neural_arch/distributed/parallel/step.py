"""One exact pipeline training step: ``PipelineRunner.step(inputs, targets, global_count)``.

Use: built by ``build_pipeline`` (pipeline.py); each step every rank of a pipeline passes
its data-parallel share (the same share on all stages of one pipeline), then the
optimizer steps on ``runner.parameters()``.

Exactness:
- Micro-batches have a fixed number of rows, because torch infers the tensors sent
  between stages from the first one. A share is padded with zero rows up to
  ``microbatches * microbatch_size`` (an uneven or empty share included); the loss of a
  padding row is replaced by an exact zero, so padding changes no gradient. The model
  must treat rows independently (no batch norm) and give finite values on all-zero rows.
- Each micro-batch's loss is ``sum of its per-sample losses * dp_size / global_count``
  and the schedules sum micro-batch gradients (``scale_grads=False``), so with the
  data-parallel average the gradient is that of the global batch's mean, as in one process.
- A parameter used by two stages on different ranks (a tied embedding and head) has one
  copy per stage; their gradients are summed across the pipeline ranks after backward,
  so both copies take identical optimizer steps and stay equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.utils._pytree import tree_map

from neural_arch.distributed.parallel.layout import ParallelLayout
from neural_arch.distributed.parallel.weighting import pad_rows

SampleLoss = Callable[[torch.Tensor, Any], torch.Tensor]
"""(last stage's output for a micro-batch, that micro-batch's targets) -> per-sample losses [rows]."""


@dataclass
class TiedParameters:
    """Parameter names that are one tensor in the full model (e.g. ``embed.weight``, ``head.weight``)."""

    groups: tuple[tuple[str, ...], ...]

    @classmethod
    def declare(cls, model: nn.Module, groups: tuple[tuple[str, ...], ...]) -> TiedParameters:
        params = dict(model.named_parameters(remove_duplicate=False))
        for group in groups:
            if len({id(params.get(name)) for name in group}) != 1 or params.get(group[0]) is None:
                raise ValueError(f"plan.tied: {group} are not one parameter of the model")
        return cls(tuple(groups))

    def local(self, modules: list[nn.Module], group: tuple[str, ...]) -> list[nn.Parameter]:
        """This rank's copies of ``group`` (one per stage holding it, duplicates removed)."""
        found: dict[int, nn.Parameter] = {}
        for module in modules:
            for name, param in module.named_parameters(remove_duplicate=False):
                if name in group:
                    found[id(param)] = param
        return list(found.values())


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


class PipelineRunner:
    """This rank's stages, their schedule, and the exact weighting of one global batch."""

    def __init__(
        self,
        stages: list,
        modules: list[nn.Module],
        layout: ParallelLayout,
        mesh: DeviceMesh,
        sample_loss: SampleLoss,
        microbatch_size: int,
        tied: TiedParameters,
        make_schedule: Callable[[list, Callable[..., torch.Tensor]], Any],
    ) -> None:
        if microbatch_size < 1:
            raise ValueError(f"build_pipeline: microbatch_size={microbatch_size} must be >= 1")
        self.modules = modules
        """This rank's stage modules (parameter names as in the full model): optimizer and checkpoints."""
        self.stage_ids = [stage.stage_index for stage in stages]
        """Pipeline stage index of each of ``modules``."""
        self.num_stages, self.pp = layout.num_stages, layout.pp
        self.capacity = layout.microbatches * microbatch_size
        self._dp_size, self._sample_loss = layout.dp_size, sample_loss
        self.group = mesh["pp"].get_group()
        """The pipeline ranks of this rank's data-parallel (and tensor) coordinate."""
        self._tied_names = tied.groups
        self._last_rank = (layout.num_stages - 1) % layout.pp  # pipeline rank holding the last stage
        self._tied = [(g, tied.local(modules, g)) for g in tied.groups]
        self._tied_shapes = self._agree_tied_shapes()
        self._batch: dict[str, Any] = {}
        self._sums: dict[int, torch.Tensor] = {}
        self.schedule = make_schedule(stages, self._microbatch_loss)

    def parameters(self) -> Iterator[nn.Parameter]:
        seen: set[int] = set()
        for module in self.modules:
            for p in module.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p

    def owned_parameters(self) -> Iterator[nn.Parameter]:
        """``parameters()`` less the copies of a tied parameter held under any but its first name,
        so that a sum over the pipeline ranks (a gradient norm) counts each tensor once."""
        later = {name for group in self._tied_names for name in group[1:]}
        first = {name for group in self._tied_names for name in group[:1]}
        skip: set[int] = set()
        for module in self.modules:
            names = {}
            for name, p in module.named_parameters(remove_duplicate=False):
                names.setdefault(id(p), set()).add(name)
            skip.update(pid for pid, held in names.items() if held & later and not held & first)
        return (p for p in self.parameters() if id(p) not in skip)

    def step(self, inputs: torch.Tensor, targets: Any, global_count: int) -> float:
        """Forward and backward of this data-parallel share; returns its sum of per-sample losses.

        ``inputs``: [n, ...] rows for the first stage; ``targets``: a tensor or a pytree of
        tensors with n rows; ``global_count``: samples in the whole global batch. Every rank
        of the pipeline returns the same sum (sent from the last stage).
        """
        n = inputs.shape[0]
        if n > self.capacity:
            raise ValueError(
                f"pipeline step: a share of {n} samples exceeds microbatches x microbatch_size = "
                f"{self.capacity}; raise microbatch_size to ceil(global batch / dp_size / microbatches)"
            )
        if not global_count > 0:
            raise ValueError(f"pipeline step: global_count={global_count!r} must be > 0")
        self._batch = {"n": n, "count": global_count, "targets": tree_map(self._pad, targets)}
        self._sums = {}
        rows = torch.arange(self.capacity, device=inputs.device)
        self.schedule.step(self._pad(inputs), target=rows)
        self._sum_tied_gradients(inputs.device)
        total = (
            torch.stack([self._sums[k] for k in sorted(self._sums)]).sum()
            if self._sums
            else torch.zeros((), dtype=torch.float64, device=inputs.device)
        )  # nccl broadcasts device tensors
        total = total.to(torch.float64).reshape(1).clone()
        dist.broadcast(total, group=self.group, group_src=self._last_rank)
        return float(total.item())

    def _pad(self, t: torch.Tensor) -> torch.Tensor:
        return pad_rows(t, self.capacity)

    def _microbatch_loss(self, output: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        targets = tree_map(lambda t: t[rows], self._batch["targets"])
        losses = self._sample_loss(output, targets)
        losses = torch.where(rows < self._batch["n"], losses, torch.zeros_like(losses))  # padding rows: exact 0
        # Keyed by the micro-batch's first row: torch calls the loss once more on the first step,
        # on placeholder outputs, to infer gradient shapes; the real call then replaces that value.
        self._sums[int(rows[0])] = losses.detach().sum()
        return losses.sum() * (self._dp_size / self._batch["count"])

    def _agree_tied_shapes(self) -> list[Optional[tuple[torch.Size, torch.dtype]]]:
        """Local (sharded) shape of each tied group, learnt from a rank holding it, for the ranks
        that hold none and take part in the sum with zeros."""
        mine = [(_local(ps[0]).shape, ps[0].dtype) if ps else None for _, ps in self._tied]
        everyone: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(everyone, mine, group=self.group)
        return [next((r[i] for r in everyone if r[i] is not None), None) for i in range(len(self._tied))]

    def _sum_tied_gradients(self, device: torch.device) -> None:
        for (names, params), meta in zip(self._tied, self._tied_shapes):
            if meta is None:
                continue  # no stage holds it (cannot happen for a declared group)
            grads = [_local(p.grad) for p in params if p.grad is not None]
            total = torch.stack(grads).sum(0) if grads else torch.zeros(meta[0], dtype=meta[1], device=device)
            dist.all_reduce(total, group=self.group)
            for p in params:
                assert p.grad is not None, f"tied parameter {names[0]} got no gradient on its stage"
                _local(p.grad).copy_(total)
