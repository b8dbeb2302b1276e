"""A ``parallel:`` layout without pipeline stages: FSDP2 and tensor parallelism (DTensor parameters).

Use: ``ShardedPlacement(model, model, dp_rank=..., dp_size=..., leader=..., min_rows=1 if tp > 1
else 0)`` with ``model`` already given to ``parallelize_model``; the trainer's ``place_model``
builds it. The full state is gathered from the shards with DCP's state-dict API onto rank 0
(``model_state``, ``optimizer_state``), in the single-process format; ``load`` sets such a
state (from any layout) back into the shards on every rank.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Iterator

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from neural_arch.distributed.parallel.checkpoint_layout import dcp_restore, dcp_savable, gather_into
from neural_arch.distributed.parallel.fsdp import without_gradient_sync
from neural_arch.distributed.parallel.gathered_eval import gathered_for_evaluation
from neural_arch.distributed.parallel.placement.base import Placement
from neural_arch.distributed.runtime.process_group import get_rank


@dataclass
class ShardedPlacement(Placement):
    """The model sharded over the mesh; ``model`` and ``plain`` are the same parallelized module."""

    sharded_by_default: ClassVar[bool] = True
    report_on_every_rank: ClassVar[bool] = True
    gather_for_eval: bool = True
    """``parallel.gather_for_eval``: gather FSDP's parameters once per evaluation (``evaluation``)."""
    noted: bool = False
    """Whether rank 0 has said that an evaluation stayed sharded (said once per run)."""

    @contextlib.contextmanager
    def evaluation(self) -> Iterator[None]:
        """FSDP gathered once for the whole evaluation where every rank has the room (gathered_eval.py)."""
        with gathered_for_evaluation(self.plain, enabled=self.gather_for_eval) as note:
            if note is not None and not self.noted and get_rank() == 0:
                print(f"note: {note} (parallel.gather_for_eval)", flush=True)
            self.noted = self.noted or note is not None
            yield

    def no_sync(self) -> ContextManager[Any]:
        """FSDP's reduce-scatter skipped (``without_gradient_sync``) until the last micro-batch."""
        return without_gradient_sync(self.model)

    def model_state(self) -> dict[str, torch.Tensor]:
        return get_model_state_dict(self.plain, options=full_options(cpu_offload=True))

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        by_name = get_optimizer_state_dict(self.plain, optimizer, options=full_options(cpu_offload=True))
        return _rekey(by_name, {name: i for i, name in enumerate(self._names())})

    def load(self, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optim_state: dict[str, Any]) -> None:
        set_model_state_dict(self.plain, model_state, options=full_options(cpu_offload=False))
        by_name = _rekey(optim_state, dict(enumerate(self._names())))
        set_optimizer_state_dict(self.plain, optimizer, by_name, options=full_options(cpu_offload=False))

    def load_weights(self, step_dir: Path, state: dict[str, Any]) -> None:
        load_sharded_weights(self.plain, step_dir, state)

    def whole_model(self, build: Callable[[], nn.Module]) -> nn.Module:
        """Gathered one parameter at a time straight into rank 0's copy: the whole model is held once."""
        whole = build() if get_rank() == 0 else None
        gather_into(self.plain, whole)
        return whole if whole is not None else self.plain  # only rank 0 writes the report

    def _names(self) -> list[str]:
        # The optimizer was built from plain.parameters(): the same order (tied weights once).
        return [name for name, _ in self.plain.named_parameters()]


def load_sharded_weights(module: nn.Module, step_dir: Path, state: dict[str, Any]) -> None:
    """The model weights of a checkpoint of either format into ``module``'s DTensor parameters (every
    rank); a sharded checkpoint is read shard by shard (DCP reshards), a full one is sliced."""
    from neural_arch.distributed.checkpoint import has_shards, load_shards

    if has_shards(state):
        target = dcp_savable({"model": get_model_state_dict(module)})
        load_shards(step_dir, target)
        set_model_state_dict(module, dcp_restore(target)["model"])
        return
    mine = get_model_state_dict(module).keys()  # a pipeline rank's stages hold some of the names
    set_model_state_dict(module, {k: state["model"][k] for k in mine}, options=full_options(cpu_offload=False))


def full_options(cpu_offload: bool) -> StateDictOptions:
    """DCP's options for the full (gathered) state dict."""
    return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload)


def _rekey(state: dict[str, Any], keys: dict[Any, Any]) -> dict[str, Any]:
    """An optimizer state dict with its parameter keys mapped through ``keys`` (names <-> indices)."""
    if not state:
        return state  # a rank that does not hold the gathered state
    groups = [{**group, "params": [keys[p] for p in group["params"]]} for group in state["param_groups"]]
    return {"state": {keys[k]: v for k, v in state["state"].items()}, "param_groups": groups}
