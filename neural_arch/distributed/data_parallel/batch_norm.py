"""BatchNorm whose batch statistics are those of the whole global batch, over every rank.

Use: ``layer = make_exact(model.bn, group)`` (in place: the module's class becomes
``ExactBatchNorm2d`` etc., a subclass of the one it had, with the same parameters, buffers and
``state_dict`` keys), then train as usual under data parallelism. The trainer does this at
placement (``training/batch_coupling.py``); try the layer with
``.venv/bin/python -m pytest tests/distributed/test_batch_norm.py -q``.

Why: ``nn.BatchNorm`` normalises each sample by the statistics of the batch it is in, so on N
ranks a sample's output depends on which other samples share its rank. Here every rank reduces
its rows to per-channel (count, mean, M2) with two passes, all ranks gather those triples
(``all_gather_single``: autograd sends each rank's gradient back through the gather), and
merge them in rank order with Chan's parallel update (``stats.merge_moments``; never
sum-of-squares). Every rank then normalises with the same global mean and biased variance,
updates the running statistics as torch does (unbiased variance, momentum or cumulative
average), and a rank with no rows contributes a count of 0. One process is world size 1: no
collective, the same arithmetic. Evaluation uses the running statistics: nothing to sync
(without them, ``track_running_stats=False``, it normalises by the global batch as in training).

Running statistics are not updated again when an activation-checkpointed block recomputes its
forward during backward (torch's own BatchNorm would count that batch twice).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from neural_arch.distributed.data_parallel.stats import merge_moments


class _Exact:
    """The forward shared by the exact classes; ``sync_group`` is set by ``make_exact``."""

    sync_group: Optional[Any] = None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        bn: Any = self
        bn._check_input_dim(input)
        if not bn.training and bn.running_mean is not None:  # every sample on its own
            return F.batch_norm(input, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps)
        return exact_batch_norm(input, bn, bn.sync_group)


class ExactBatchNorm1d(_Exact, nn.BatchNorm1d):
    """``nn.BatchNorm1d`` with statistics over the global batch."""


class ExactBatchNorm2d(_Exact, nn.BatchNorm2d):
    """``nn.BatchNorm2d`` with statistics over the global batch."""


class ExactBatchNorm3d(_Exact, nn.BatchNorm3d):
    """``nn.BatchNorm3d`` with statistics over the global batch."""


class ExactSyncBatchNorm(_Exact, _BatchNorm):
    """What an ``nn.SyncBatchNorm`` becomes: the same on any device (torch's needs CUDA, and torch's
    DDP refuses one on CPU), over the data-parallel group. Not a subclass of it for that reason."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")


EXACT_CLASSES: dict[type, type] = {
    nn.BatchNorm1d: ExactBatchNorm1d,
    nn.BatchNorm2d: ExactBatchNorm2d,
    nn.BatchNorm3d: ExactBatchNorm3d,
    nn.SyncBatchNorm: ExactSyncBatchNorm,
}
"""The batch-norm classes made exact, and what each becomes (exact classes map to themselves)."""
EXACT_CLASSES.update({exact: exact for exact in list(EXACT_CLASSES.values())})


def make_exact(module: nn.Module, group: Optional[Any] = None) -> nn.Module:
    """Turn ``module`` (one of ``EXACT_CLASSES``) into its exact class in place and return it;
    ``group``: the ranks that hold different samples (None: every rank, or none without a
    process group). Parameters and buffers are untouched, so checkpoints load either way."""
    module.__class__ = EXACT_CLASSES[type(module)]
    module.sync_group = group  # type: ignore[assignment]
    return module


def exact_batch_norm(x: torch.Tensor, bn: Any, group: Optional[Any]) -> torch.Tensor:
    """Training-mode batch norm of ``x`` with the statistics of every rank's rows together."""
    # Statistics at least in float32 (as torch's kernels under autocast); float64 stays float64.
    dtype = torch.promote_types(x.dtype, torch.float32)
    xs = x.to(dtype)
    channels = x.shape[1]
    dims = [0, *range(2, x.dim())]
    rows = x.numel() // channels if channels else 0
    n = torch.tensor(float(rows), dtype=dtype, device=x.device)
    mean = xs.sum(dims) / max(rows, 1)  # a rank without rows: mean 0, M2 0, count 0
    m2 = ((xs - _per_channel(mean, x.dim())) ** 2).sum(dims)
    total, mean, m2 = merge_moments(_gathered(torch.cat([n.reshape(1), mean, m2]), channels, group))
    count = int(total)
    if count <= 1:  # torch's rule, for the global batch: a variance needs two values
        raise ValueError(
            f"{type(bn).__name__}: expected more than 1 value per channel when training, got "
            f"{count} over the global batch (input of shape {tuple(x.shape)} on this rank)"
        )
    recomputing = torch._C._current_graph_task_id() >= 0  # inside backward: a checkpointed block's rerun
    if bn.training and bn.track_running_stats and not recomputing:
        _update_running(bn, mean.detach(), m2.detach() / (count - 1))
    scale = torch.rsqrt(m2 / count + bn.eps)
    y = (xs - _per_channel(mean, x.dim())) * _per_channel(scale, x.dim())
    if bn.weight is not None:
        y = y * _per_channel(bn.weight.to(dtype), x.dim()) + _per_channel(bn.bias.to(dtype), x.dim())
    return y.to(x.dtype)


def _gathered(packed: torch.Tensor, channels: int, group: Optional[Any]) -> list[tuple[Any, Any, Any]]:
    """Every rank's (count, mean, M2), in rank order; differentiable through the gather."""
    if dist.is_available() and dist.is_initialized():
        group = dist.group.WORLD if group is None else group
        if dist.get_world_size(group) > 1:
            from torch.distributed._functional_collectives import all_gather_single

            packed = all_gather_single(packed, 0, group)
    parts = packed.reshape(-1, 1 + 2 * channels)
    return [(p[0].detach(), p[1 : 1 + channels], p[1 + channels :]) for p in parts]


def _update_running(bn: Any, mean: torch.Tensor, unbiased_var: torch.Tensor) -> None:
    """torch's running-statistics update: momentum, or a cumulative average when it is None."""
    with torch.no_grad():
        factor = 0.0 if bn.momentum is None else bn.momentum
        if bn.num_batches_tracked is not None:
            bn.num_batches_tracked.add_(1)
            if bn.momentum is None:
                factor = 1.0 / float(bn.num_batches_tracked)
        bn.running_mean.mul_(1 - factor).add_(mean.to(bn.running_mean.dtype), alpha=factor)
        bn.running_var.mul_(1 - factor).add_(unbiased_var.to(bn.running_var.dtype), alpha=factor)


def _per_channel(values: torch.Tensor, dims: int) -> torch.Tensor:
    """``values`` of shape [C] shaped to broadcast over an input of ``dims`` dimensions."""
    return values.reshape(1, -1, *([1] * (dims - 2)))
