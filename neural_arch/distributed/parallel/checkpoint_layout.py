"""Make a parallel model's state dict savable by DCP, and put loaded values back in place.

Use (every rank; ``model`` and ``opt`` on any layout)::

    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save(dcp_savable({"model": model_sd, "optim": optim_sd}), checkpoint_id=path)
    ...                                              # later, on any layout and world size
    model_sd, optim_sd = get_state_dict(model, opt)
    view = dcp_savable({"model": model_sd, "optim": optim_sd})
    dcp.load(view, checkpoint_id=path)
    loaded = dcp_restore(view)
    set_state_dict(model, opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])

Why: DCP stores each rank's part of a tensor as one box of the full tensor. A
``FusedColwiseParallel`` weight holds rows [q_r; k_r; v_r], three boxes, so DCP refuses it
("has overlapping chunks"). ``dcp_savable`` gathers such tensors over the tensor-parallel
dim only (a ``Replicate`` there, still sharded by FSDP), whose boxes DCP can save and
reshard to any other layout; ``dcp_restore`` slices the loaded values back to the strided
layout locally, without communication. Everything else passes through untouched.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard
from torch.utils._pytree import tree_map

_ORIGINAL = "_neural_arch_placements"


def _scattered(t: Any) -> list[int]:
    """Mesh dims whose strided placement leaves this rank's part in several boxes.

    A strided shard followed by a plain shard of the same tensor dim (FSDP over a
    column-split weight) nests into one box, which DCP saves; a strided shard with none
    after it (``FusedColwiseParallel``'s [q_r; k_r; v_r]) does not.
    """
    if not isinstance(t, DTensor):
        return []
    ps = t.placements
    return [
        i
        for i, p in enumerate(ps)
        if isinstance(p, _StridedShard) and not any(type(q) is Shard and q.dim == p.dim for q in ps[i + 1 :])
    ]


def gather_into(sharded: nn.Module, whole: Optional[nn.Module]) -> None:
    """Copy every parameter and buffer of ``sharded`` (FSDP/tensor-parallel DTensors or plain
    tensors) into the same names of ``whole``, one tensor at a time: the full tensor exists only
    while it is copied. Call on every rank (each DTensor is gathered collectively); ``whole``
    is the single-process model on the rank that wants it, None elsewhere."""
    for module in sharded.modules():
        if isinstance(module, FSDPModule):
            module.reshard()  # after an evaluation forward the root may still hold gathered parameters
    targets = dict(whole.named_parameters()) | dict(whole.named_buffers()) if whole is not None else {}
    sources = list(sharded.named_parameters()) + list(sharded.named_buffers())
    with torch.no_grad():
        for name, tensor in sources:
            full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor.detach()
            if name in targets:
                targets[name].copy_(full.to(targets[name].device))


def dcp_savable(state: Any) -> Any:
    """``state`` (any nesting of dicts/lists/tuples) with DCP-unsavable DTensors replicated over their strided dim."""

    def convert(t: Any) -> Any:
        dims = _scattered(t)
        if not dims:
            return t
        placements = [Replicate() if i in dims else p for i, p in enumerate(t.placements)]
        out = t.redistribute(placements=placements)
        setattr(out, _ORIGINAL, t.placements)  # what dcp_restore() slices it back to
        return out

    return tree_map(convert, state)


def dcp_restore(state: Any) -> Any:
    """Inverse of ``dcp_savable`` after ``dcp.load`` filled it: tensors back in their model layout."""

    def convert(t: Any) -> Any:
        original = getattr(t, _ORIGINAL, None)
        return t if original is None else t.redistribute(placements=original)

    return tree_map(convert, state)
