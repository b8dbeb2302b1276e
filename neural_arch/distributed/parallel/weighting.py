"""Exact loss weighting on any layout: ``data_parallel_loss`` and padding for empty shares.

Use::

    x, y = pad_rows(x, 1), pad_rows(y, 1)           # only if this rank's share may be empty
    losses = per_sample_loss(model(x), y)            # [rows]
    data_parallel_loss(losses, global_count, dp_size(mesh), valid=n).backward()

Why the padding: DTensor (tensor parallelism) cannot propagate shardings through a batch
of zero rows in torch 2.13 (``Sharding propagation failed for aten.view.default(Spec(f64[0,
8, 48]...``), yet a rank with an empty share must still run forward and backward so its
peers' collectives are matched. A padding row runs like any other and its loss is
replaced by an exact zero, so it changes no gradient -- provided the model gives finite
values on an all-zero row (the zero gradient flowing back through an infinite partial
derivative would be NaN); a byte model's all-zero row is a run of byte 0.
"""

from __future__ import annotations

from typing import Optional, Union

import torch


def pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    """``t`` with zero rows appended up to ``rows`` rows (unchanged if it has as many)."""
    missing = rows - t.shape[0]
    return torch.cat([t, t.new_zeros((missing, *t.shape[1:]))]) if missing > 0 else t


def data_parallel_loss(
    losses: torch.Tensor, global_count: Union[int, float], dp_ranks: int, valid: Optional[int] = None
) -> torch.Tensor:
    """``losses[:valid].sum() * dp_ranks / global_count``: this rank's loss for exact gradients.

    The data-parallel gradient reduction (DDP all-reduce, FSDP reduce-scatter, HSDP both)
    averages over the ``dp_ranks`` ranks that see different samples, so the result is the
    gradient of ``sum over the global batch / global_count`` however the samples are split,
    an empty share included. Tensor and pipeline peers compute the same samples' loss and
    must not be counted in ``dp_ranks``. Rows from ``valid`` on are padding (see ``pad_rows``):
    their losses become exact zeros.
    """
    if not global_count > 0:
        raise ValueError(
            f"data_parallel_loss: global_count={global_count!r} must be > 0 (samples in the "
            "global batch over all data-parallel ranks)"
        )
    if valid is not None:
        keep = torch.arange(losses.shape[0], device=losses.device) < valid
        losses = torch.where(keep, losses, torch.zeros_like(losses))
    return losses.sum() * (dp_ranks / global_count)
