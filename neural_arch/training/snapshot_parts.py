"""One rank's part of a sharded memory snapshot: its shards as plain local tensors, and back.

Use (``memory_snapshot.py``; every rank of a sharded layout, e.g. FSDP)::

    part = local_part(components.shard_state())          # push: DTensors -> their local tensors
    fill_part(components.placement.shard_state(opt), part)  # restore: into this layout's own shards

Why local tensors: a restart inside one launcher comes back on the same mesh, so every rank's
shards have the same shapes and places as when they were pushed, and copying them back into the
freshly built layout's DTensors is exact with no resharding and no collective (a DTensor itself
would pickle its device mesh and process group). Anything else (another world size or mesh) does
not match and is refused by ``fill_part`` in one line; the caller then resumes from disk, where
DCP reshards.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeGuard

import torch

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor


class PartMismatch(ValueError):
    """The snapshot's part does not fit this layout's shards (another mesh or world size)."""


def is_dtensor(value: Any) -> TypeGuard[DTensor]:
    """Whether ``value`` is a DTensor, without importing DTensor: none can exist before its module
    is loaded (by a sharded layout), and the import costs each rank 0.7 s of CPU on a quiet machine
    (it pulls in sympy), 30 % of a replicated worker's imports."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(value, module.DTensor)


def local_part(tree: Any) -> Any:
    """``tree`` (dicts/lists/tuples of tensors and plain values) with each DTensor replaced by its local shard."""
    if is_dtensor(tree):
        return tree.to_local()
    if isinstance(tree, dict):
        return {k: local_part(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(local_part(v) for v in tree)
    return tree


def fill_part(target: Any, part: Any, where: str = "", copy: bool = True) -> Any:
    """Copy ``part`` (``local_part`` of the same layout's state) into ``target`` in place; returns
    the filled tree (plain values are taken from ``part``, as a DCP load replaces them).
    ``copy=False`` only checks that it fits (``PartMismatch`` where not), changing nothing."""
    if isinstance(target, torch.Tensor):
        local = target.to_local() if is_dtensor(target) else target
        if not isinstance(part, torch.Tensor) or part.shape != local.shape or part.dtype != local.dtype:
            got = f"{tuple(part.shape)} {part.dtype}" if isinstance(part, torch.Tensor) else type(part).__name__
            raise PartMismatch(
                f"{where or 'the state'}: this layout holds {tuple(local.shape)} {local.dtype}, the snapshot {got}"
            )
        if copy:
            with torch.no_grad():
                local.copy_(part)
        return target
    if isinstance(target, dict):
        if not isinstance(part, dict) or part.keys() != target.keys():
            raise PartMismatch(f"{where or 'the state'}: other keys than this layout's")
        filled = {k: fill_part(target[k], part[k], f"{where}.{k}" if where else str(k), copy) for k in target}
        if copy:
            target.update(filled)
        return target
    if isinstance(target, (list, tuple)):
        if not isinstance(part, (list, tuple)) or len(part) != len(target):
            raise PartMismatch(f"{where or 'the state'}: another length than this layout's")
        items = [fill_part(t, p, f"{where}[{i}]", copy) for i, (t, p) in enumerate(zip(target, part))]
        return type(target)(items) if copy else target
    return part if copy else target
