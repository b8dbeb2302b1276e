"""Sharded data parallelism with torch's FSDP2: ``apply_fsdp(model, mesh, layout, blocks)``.

Use: after tensor parallelism and activation checkpointing (in that order, as torchtitan
does), ``apply_fsdp(model, build_mesh(layout), layout, model.blocks)``, then build the
optimizer on ``model.parameters()`` (DTensors holding this rank's shard).

Each block becomes one FSDP group (its parameters are all-gathered just before its
forward and its gradients reduce-scattered right after its backward), then the root
takes what is left (embeddings, final norm, head), which is ZeRO-3. With both
``dp_replicate`` and ``dp_shard`` > 1 the mesh is 2-D and FSDP shards over ``dp_shard``
and all-reduces over ``dp_replicate`` (HSDP); with only ``dp_replicate`` > 1 the shard dim
has size 1, so every rank keeps whole parameters and gradients are all-reduced (DDP
semantics through the same code). The reduction averages over all of them, which
``data_parallel_loss`` accounts for. A weight split by ``FusedColwiseParallel`` is sharded
along dim 1 (``shard_dim``); its size there must divide by ``dp_shard``.

Gradient accumulation: ``with without_gradient_sync(model):`` around all but the last
micro-batch keeps their gradients unsharded and local; the last backward reduce-scatters
the sum once (FSDP2's ``set_requires_gradient_sync``), as DDP's ``no_sync`` does.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator, Optional

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
    register_fsdp_forward_method,
)
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.placement_types import _StridedShard

from neural_arch.distributed.parallel.layout import DTYPES, ParallelLayout
from neural_arch.distributed.parallel.mesh import DP_DIMS


def needs_fsdp(layout: ParallelLayout) -> bool:
    """FSDP is applied when ranks see different samples or a mixed-precision dtype is asked for."""
    return layout.dp_size > 1 or layout.param_dtype is not None or layout.reduce_dtype is not None


def fsdp_mesh(mesh: DeviceMesh, layout: ParallelLayout) -> DeviceMesh:
    """1-D ``dp_shard`` mesh (FSDP), or the 2-D (dp_replicate, dp_shard) mesh (HSDP) when replicating."""
    return mesh[DP_DIMS] if layout.dp_replicate > 1 else mesh["dp_shard"]


def mixed_precision(layout: ParallelLayout) -> MixedPrecisionPolicy:
    """FSDP's policy from the layout's dtype names (None keeps the parameters' own dtype)."""
    return MixedPrecisionPolicy(param_dtype=_dtype(layout.param_dtype), reduce_dtype=_dtype(layout.reduce_dtype))


def apply_fsdp(
    model: nn.Module,
    mesh: DeviceMesh,
    layout: ParallelLayout,
    blocks: Iterable[nn.Module],
    reshard_after_forward: Optional[bool] = None,
    materialize: Callable[[nn.Module], None] = lambda module: None,
    forward_methods: tuple[str, ...] = (),
) -> nn.Module:
    """Shard every block, then the root, over the layout's data-parallel ranks; returns ``model``.

    ``reshard_after_forward`` (default: the layout's) frees gathered block parameters after
    forward; the root is never resharded after forward, since backward starts with it.
    ``materialize(part)`` runs just before each part is sharded (a deferred build allocates
    one block's full tensors, which sharding then frees). ``forward_methods`` of the blocks and
    the root (where they have them) gather and free parameters as ``forward`` does.
    """
    reshard = layout.reshard_after_forward if reshard_after_forward is None else reshard_after_forward
    common = dict(
        mesh=fsdp_mesh(mesh, layout),
        mp_policy=mixed_precision(layout),
        offload_policy=CPUOffloadPolicy() if layout.cpu_offload else OffloadPolicy(),
        shard_placement_fn=shard_dim,
    )
    for block in blocks:
        materialize(block)
        fully_shard(block, reshard_after_forward=reshard, **common)
    materialize(model)
    fully_shard(model, reshard_after_forward=False, **common)
    for module in [*blocks, model]:
        for method in forward_methods:
            if hasattr(module, method):
                register_fsdp_forward_method(module, method)
    return model


@contextlib.contextmanager
def without_gradient_sync(model: nn.Module) -> Iterator[None]:
    """Backwards inside accumulate unsharded gradients locally: no reduce-scatter (or HSDP
    all-reduce) until the first backward after the block. ``model``: the FSDP root; a model
    without FSDP passes through untouched."""
    if not isinstance(model, FSDPModule):
        yield
        return
    model.set_requires_gradient_sync(False)  # recurse: every FSDP group below the root
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def shard_dim(param: nn.Parameter) -> Optional[Shard]:
    """Dim 1 for a weight that tensor parallelism split into strided parts on dim 0, else FSDP's default.

    FSDP shards a rank's local tensor into contiguous rows of dim 0. For a fused [q; k; v]
    weight whose local tensor is [q_r; k_r; v_r] (``FusedColwiseParallel``) those rows
    would cross part boundaries, a layout no DTensor placement describes, so ``full_tensor()``
    and checkpoints would scramble it. Sharding dim 1 keeps the two splits independent.
    """
    if isinstance(param, DTensor) and any(isinstance(p, _StridedShard) and p.dim == 0 for p in param.placements):
        if param.ndim < 2:
            raise ValueError(
                f"FSDP cannot shard a 1-D parameter of shape {tuple(param.shape)} that tensor "
                "parallelism split into strided parts; keep it replicated over tp"
            )
        return Shard(1)
    return None


def _dtype(name: Optional[str]) -> Optional[torch.dtype]:
    return None if name is None else DTYPES[name]
