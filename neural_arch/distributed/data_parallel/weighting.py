"""Exact loss weighting when ranks hold different numbers of samples (even zero).

Use: ``loss = global_batch_loss(per_sample_losses, batch.global_size)`` then
``loss.backward()`` on a ``DistributedDataParallel`` model.

Why: DDP averages gradients over ranks, ``g = (1/W) * sum_r g_r``. If each rank's loss is
its *sum* of per-sample losses times ``W / N`` (N = samples in the global batch, over all
ranks and all accumulated micro-batches), then ``g = (1/N) * sum_i grad l_i``: exactly the
gradient of the mean loss over the global batch in one process, however the N samples
are split. A rank with no samples contributes a zero loss that still runs backward, so
DDP's collectives stay matched; no sample is ever duplicated to pad a rank.
"""

from __future__ import annotations

from typing import Union

import torch
from torch import nn

from neural_arch.distributed.runtime.collectives import all_reduce
from neural_arch.distributed.runtime.guard import require_process_group
from neural_arch.distributed.runtime.process_group import get_world_size


def global_batch_loss(loss: torch.Tensor, global_count: Union[int, float]) -> torch.Tensor:
    """``loss.sum() * world_size / global_count``: the per-rank loss for exact DDP gradients.

    ``loss`` holds per-sample (or per-unit, e.g. per-cell) losses of this rank's share;
    ``global_count`` is how many samples (units) the whole global batch has over all ranks.
    """
    require_process_group("global_batch_loss")
    if not global_count > 0:
        raise ValueError(
            f"global_batch_loss: global_count={global_count!r} must be > 0 (the number of samples "
            "in the global batch over all ranks, e.g. IndexBatch.global_size)."
        )
    return loss.sum() * (get_world_size() / global_count)


def global_count(local_count: Union[int, float]) -> float:
    """Sum of ``local_count`` over ranks, for when the global count is not known up front."""
    return float(all_reduce(torch.tensor(float(local_count), dtype=torch.float64)).item())


def zero_loss(model: nn.Module) -> torch.Tensor:
    """A zero loss touching every trainable parameter, for a rank whose model cannot run on
    an empty batch: its backward gives zero gradients and keeps DDP's all-reduce matched."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("zero_loss: the model has no trainable parameters.")
    return torch.stack([p.sum() * 0 for p in params]).sum()
