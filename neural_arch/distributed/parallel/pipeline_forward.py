"""The whole model's forward over a pipeline, for validation: ``PipelineForward(runner)(x)``.

Use (every rank of the job, inside ``torch.no_grad()``)::

    whole = PipelineForward(runner)      # runner from build_pipeline
    logits = whole(x)                    # the same full output on every pipeline rank

Stage s runs on the rank that holds it, then its output is broadcast to the pipeline's
ranks, and the next stage's rank continues: one stage at a time, any number of rows (an
evaluation batch need not fill the training micro-batches), no autograd. Validation is
a small share of the work, so clarity wins over overlap here; training uses the
schedules (``PipelineRunner.step``). Every rank ends with the last stage's output, so
code written for a whole model (``task.eval_sums(model, batch)``) runs unchanged.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from neural_arch.distributed.parallel.step import PipelineRunner


class PipelineForward(nn.Module):
    """A module whose forward is the full model's, computed by this pipeline's ranks together."""

    def __init__(self, runner: PipelineRunner) -> None:
        super().__init__()
        self.stages = nn.ModuleDict({str(s): m for s, m in zip(runner.stage_ids, runner.modules)})
        self._num_stages, self._pp, self._group = runner.num_stages, runner.pp, runner.group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            raise RuntimeError("PipelineForward is for evaluation: call it under torch.no_grad()")
        h: Optional[torch.Tensor] = x
        for s in range(self._num_stages):
            mine = str(s) in self.stages
            h = self._share(self.stages[str(s)](h) if mine else None, owner=s % self._pp, device=x.device)
        assert h is not None
        return h

    def _share(self, out: Optional[torch.Tensor], owner: int, device: torch.device) -> torch.Tensor:
        """``out`` of the pipeline rank ``owner``, on every pipeline rank (shape sent first)."""
        meta: list[object] = [None if out is None else (tuple(out.shape), out.dtype)]
        dist.broadcast_object_list(meta, group=self._group, group_src=owner)
        shape, dtype = meta[0]  # type: ignore[misc]
        buf = out.contiguous() if out is not None else torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(buf, group=self._group, group_src=owner)
        return buf
