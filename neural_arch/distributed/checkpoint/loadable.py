"""Refuse, before writing, state that ``torch.load(weights_only=True)`` could not load back.

Use: ``check_loadable(state)`` raises a ``CheckpointError`` naming the first offending key.

Why: checkpoints are loaded with ``weights_only=True`` (no arbitrary unpickling), so
storing, say, a numpy scalar would save fine and fail only at the resume, when the run
is already lost. Checked against torch 2.13.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from neural_arch.distributed.checkpoint.errors import CheckpointError

# What torch.load(weights_only=True) rebuilds (checked against torch 2.13). Exact types on
# purpose: numpy.float64 is a float subclass, but unpickling it needs numpy and fails.
_LEAVES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    torch.Tensor,
    torch.nn.Parameter,
    torch.Size,
    torch.dtype,
    torch.device,
    torch.layout,
)
_CONTAINERS = (dict, OrderedDict, list, tuple, set)


def check_loadable(state: Any) -> None:
    """Raise naming the first value of ``state`` torch.load(weights_only=True) could not rebuild."""
    _check_value(state, "state", set())


def _check_value(value: Any, where: str, on_path: set[int]) -> None:
    # Why walk instead of a trial load: it names the key, and costs no second copy of the state.
    kind = type(value)
    if kind in _LEAVES or kind in torch.serialization.get_safe_globals():
        return
    if kind not in _CONTAINERS:
        raise CheckpointError(
            f"{where} is a {kind.__module__}.{kind.__qualname__}, which torch.load(weights_only=True) cannot "
            "load; store plain data (tensors, numbers, str, bool, None and lists/tuples/dicts of them, e.g. a "
            "state_dict()), converting with float(x), x.tolist() or torch.as_tensor(x); DTensor state goes "
            "through save_sharded"
        )
    if id(value) in on_path:
        raise CheckpointError(f"{where} contains itself; a checkpoint must be a tree, not a cycle")
    on_path.add(id(value))
    for key, item in value.items() if isinstance(value, dict) else enumerate(value):
        if isinstance(value, dict):
            _check_value(key, f"{where} key {key!r}", on_path)
        _check_value(item, f"{where}[{key!r}]", on_path)
    on_path.discard(id(value))
