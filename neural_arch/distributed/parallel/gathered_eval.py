"""Evaluate an FSDP model gathered once, not once per batch or per generated token.

Use (every rank, around forwards that need no gradients)::

    with gathered_for_evaluation(model) as note:   # note: None, or why it stayed sharded
        for batch in val_batches: model(batch)

FSDP gathers a block's parameters before each forward and frees them after it, so that a
training step never holds the whole model. Evaluation runs many small forwards (a validation
batch, then a report generating one token at a time), and each one gathers the whole model
again over the network: on the CPU with gloo, a 99M-parameter transformer's final validation and
report took minutes on FSDP x2 against seconds on DDP x2. Here every FSDP module is gathered
once and kept gathered until the block ends, then freed (the training step after it gathers
as always). The values are those of per-forward gathering (the same all-gather of the same
shards), so evaluation stays exact.

Holding the whole model costs its unsharded bytes on every rank for the duration. Every rank
checks that it has the room (``staging_room.StagingRoom``: the memory cgroup, ``MemAvailable``,
CUDA's free memory); if any rank has not, every rank keeps gathering per forward (the layout's
memory promise first) and the reason comes back as ``note``. ``enabled=False`` always does.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from torch import nn
from torch.distributed.fsdp import FSDPModule

from neural_arch.distributed.checkpoint.staging_room import StagingRoom
from neural_arch.distributed.runtime.collectives import all_gather_object


@contextlib.contextmanager
def gathered_for_evaluation(
    model: nn.Module, room: Optional[StagingRoom] = None, enabled: bool = True
) -> Iterator[Optional[str]]:
    """Keep ``model``'s FSDP modules gathered inside the block where every rank has the room."""
    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not modules or not enabled:
        yield None
        return
    host, device = _gathered_bytes(model)
    why = (room or StagingRoom()).shortfall(host, device, held_through_training=False)
    reasons = all_gather_object(why)  # every rank gathers (a collective) or none does
    short = [(rank, reason) for rank, reason in enumerate(reasons) if reason is not None]
    if short:
        yield f"the model stays sharded during evaluation (gathered per forward): on rank {short[0][0]} {short[0][1]}"
        return
    before = [_reshards_after_forward(m) for m in modules]
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
        module.unshard()
    try:
        yield None
    finally:
        for module, reshard in zip(modules, before):
            module.reshard()
            module.set_reshard_after_forward(reshard, recurse=False)


def _gathered_bytes(model: nn.Module) -> tuple[int, int]:
    """Bytes the gathered parameters add to this rank's shards: (host, device)."""
    host = device = 0
    for parameter in model.parameters():
        local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
        size = (parameter.numel() - local.numel()) * parameter.element_size()
        if local.device.type == "cpu":
            host += size
        else:
            device += size
    return host, device


def _reshards_after_forward(module: FSDPModule) -> bool:
    """Whether ``module`` frees its gathered parameters after forward (FSDP keeps this in its
    parameter group; ``fully_shard``'s default, True, where the group cannot be read)."""
    group = getattr(module._get_fsdp_state(), "_fsdp_param_group", None)
    return group is None or getattr(group, "post_forward_mesh_info", True) is not None
