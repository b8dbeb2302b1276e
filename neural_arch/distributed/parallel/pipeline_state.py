"""Full single-process checkpoint state of a pipeline layout, and loading it back.

Used by ``PipelinePlacement`` (``placement/pipelined.py``) when ``parallel.pp > 1``:
``pipeline_model_state(view, group)`` and ``pipeline_optimizer_state(...)`` on every rank
(rank 0 gets the whole model's state, the others an empty dict), ``load_pipeline_state(...)``
on every rank with the full state of a run on any layout.

Each rank holds some stages, seen as one module with the full model's names
(``stage_view``); DCP's state-dict API gathers their tensors from FSDP/tensor-parallel
shards, and the pipeline ranks send their parts to pipeline rank 0. Optimizer state is
keyed by parameter index in the full model's order, as ``optimizer.state_dict()`` of one
process: a tied parameter held by two stages (``embed.weight`` / ``head.weight``) has one
index, and its two copies hold the same state (they take identical steps).

Sharded checkpoints (``pipeline_shard_state`` / ``load_pipeline_shards``): each rank's stages
are saved by name with DCP; the optimizer state of a tied copy is saved under the name one
process gives it (``embed.weight`` for the head's copy too), so the shards load on any layout.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule

_EVERY_RANK = StateDictOptions(full_state_dict=True, cpu_offload=False)


def parameter_indices(model: nn.Module) -> dict[str, int]:
    """Every parameter name of ``model`` (tied ones under each name) -> its index in ``model.parameters()``."""
    ids: dict[int, int] = {}
    return {name: ids.setdefault(id(p), len(ids)) for name, p in model.named_parameters(remove_duplicate=False)}


def pipeline_model_state(view: nn.Module, group: dist.ProcessGroup) -> dict[str, Any]:
    """The whole model's state on pipeline rank 0 of ``group`` (an empty dict elsewhere)."""
    reshard_stages(view)
    mine = {k: v.cpu() for k, v in get_model_state_dict(view, options=_EVERY_RANK).items()}
    full: dict[str, Any] = {}
    for part in _gather(mine, group):
        full.update(part)
    return full


def pipeline_optimizer_state(
    view: nn.Module, optimizer: torch.optim.Optimizer, group: dist.ProcessGroup, indices: dict[str, int]
) -> dict[str, Any]:
    """The whole model's optimizer state, keyed by index, on pipeline rank 0 of ``group`` ({} elsewhere)."""
    reshard_stages(view)
    optim = get_optimizer_state_dict(view, optimizer, options=_EVERY_RANK)
    if len(optim["param_groups"]) != 1:
        raise ValueError(
            f"pipeline checkpoints hold one optimizer parameter group; the optimizer has {len(optim['param_groups'])}"
        )
    mine = ({name: _to_cpu(s) for name, s in optim["state"].items()}, optim["param_groups"][0])
    parts = _gather(mine, group)
    if not parts:
        return {}
    state = {indices[name]: value for part, _ in parts for name, value in part.items()}
    return {"state": state, "param_groups": [{**parts[0][1], "params": sorted(set(indices.values()))}]}


def _gather(mine: Any, group: dist.ProcessGroup) -> list[Any]:
    """Every pipeline rank's ``mine`` on pipeline rank 0 (in rank order); [] on the others."""
    first = dist.get_rank(group) == 0
    parts: list[Any] = [None] * dist.get_world_size(group) if first else []
    dist.gather_object(mine, parts if first else None, group=group, group_dst=0)
    return parts


def load_pipeline_state(
    view: nn.Module,
    optimizer: torch.optim.Optimizer,
    indices: dict[str, int],
    model_state: dict[str, Any],
    optim_state: dict[str, Any],
) -> None:
    """Load a full single-process state into this rank's stages and the optimizer over them."""
    reshard_stages(view)
    mine = view.state_dict(keep_vars=True).keys()
    set_model_state_dict(view, {k: model_state[k] for k in mine}, options=_EVERY_RANK)
    names = {id(p): name for name, p in view.named_parameters()}
    ordered = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    state = {name: optim_state["state"][indices[name]] for name in ordered if indices[name] in optim_state["state"]}
    group = {**optim_state["param_groups"][0], "params": ordered}
    set_optimizer_state_dict(view, optimizer, {"state": state, "param_groups": [group]}, options=_EVERY_RANK)


def pipeline_shard_state(view: nn.Module, optimizer: torch.optim.Optimizer, indices: dict[str, int]) -> dict[str, Any]:
    """This rank's stages and their optimizer state, by the single-process names, for DCP."""
    reshard_stages(view)
    optim = get_optimizer_state_dict(view, optimizer)
    return {"model": get_model_state_dict(view), "optim": _renamed(optim, _canonical(indices))}


def load_pipeline_shards(
    view: nn.Module, optimizer: torch.optim.Optimizer, indices: dict[str, int], loaded: dict[str, Any]
) -> None:
    """Set what ``pipeline_shard_state`` described, after DCP filled it, into the stages and optimizer."""
    canonical = _canonical(indices)
    back = {canonical[name]: name for name, _ in view.named_parameters()}
    set_model_state_dict(view, loaded["model"])
    set_optimizer_state_dict(view, optimizer, _renamed(loaded["optim"], back))


def _canonical(indices: dict[str, int]) -> dict[str, str]:
    """Every parameter name -> the first name of its tensor in the full model (one process's name)."""
    first: dict[int, str] = {}
    return {name: first.setdefault(index, name) for name, index in indices.items()}


def _renamed(optim: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """An FQN-keyed optimizer state dict with its parameter names mapped through ``names``."""
    groups = [{**group, "params": [names.get(p, p) for p in group["params"]]} for group in optim["param_groups"]]
    return {"state": {names.get(k, k): v for k, v in optim["state"].items()}, "param_groups": groups}


def reshard_stages(view: nn.Module) -> None:
    """Put every FSDP group of this rank's stages back in shards (before reading or setting state)."""
    # A stage's root FSDP module keeps its parameters gathered after an evaluation forward;
    # the view bypasses that module's state-dict hooks, so put every group back in shards.
    for module in view.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def _to_cpu(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
