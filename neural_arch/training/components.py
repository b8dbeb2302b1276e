"""Everything the training loop updates, built from a config, and its checkpoint state.

Used by trainer.py: ``parts = TrainingComponents.build(cfg, device)``, then
``parts.checkpoint_state()`` / ``parts.restore(state, seed)``. All values in the state are
plain tensors, numbers and lists, so checkpoints load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

import neural_arch.distributed as nd
from neural_arch.distributed.data_parallel.keyed_random import KeyedRandomness
from neural_arch.distributed.parallel.placement.base import Placement
from neural_arch.training.builders import build_optimizer, build_scaler, build_scheduler, compile_blocks
from neural_arch.training.config import Config, config_to_dict
from neural_arch.training.placement import place_model
from neural_arch.training.registry import task_class
from neural_arch.training.rng import capture_rng, restore_rng, seed_rank
from neural_arch.training.task import Task


@dataclass
class TrainingComponents:
    """The task, the placed model, optimizer, LR schedule, loss scaler, sampler and step count."""

    cfg: Config
    task: Task
    placement: Placement
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler
    sampler: nd.DistributedSampler
    device: torch.device
    step: int = 0
    tracking_ids: dict[str, str] = field(default_factory=dict)
    """The tracking runs this training run logs to, by service (``mlflow``, ``wandb``); kept in the
    checkpoint, so a resumed job reopens them."""
    forward_seconds: float = 0.0
    """This rank's seconds in forward passes during its last step, before any gradient sync (a
    pipeline: its whole schedule); the straggler signal (stragglers.py)."""
    keyed: Optional[KeyedRandomness] = None
    """Draws every random op of a training forward (dropout) per sample, so that a sample's mask
    does not depend on the number of ranks or micro-batches; None: the process's own stream."""

    @classmethod
    def build(cls, cfg: Config, device: torch.device) -> TrainingComponents:
        """Build on every rank (the task's ``prepare`` may run collectives)."""
        task = task_class(cfg.run.task)(cfg)
        task.prepare()
        placement = place_model(task, cfg, device)
        if cfg.training.compile:  # plain data parallel only (validate_config): the wrapper calls these modules
            compile_blocks(placement.plain)
        optimizer = build_optimizer(cfg, placement.model)
        # Ranks of one data-parallel group (tensor-parallel peers) draw the same share.
        sampler = nd.DistributedSampler(
            dataset_size=task.train_size,
            batch_size=cfg.training.global_batch_size,
            seed=cfg.run.seed,
            rank=placement.dp_rank,
            num_replicas=placement.dp_size,
        )
        parts = cls(
            cfg, task, placement, optimizer, build_scheduler(cfg, optimizer), build_scaler(cfg, device), sampler, device
        )
        parts.keyed = KeyedRandomness(cfg.run.seed, model=placement.plain, announce=nd.get_rank() == 0)
        return parts

    @property
    def model(self) -> torch.nn.Module:
        """The model the training step calls."""
        return self.placement.model

    @property
    def sharded_checkpoints(self) -> bool:
        """Whether checkpoints hold every rank's own shards (``checkpoint.format``; ``auto``: any
        ``parallel:`` layout) rather than the gathered single-process state."""
        chosen = self.cfg.checkpoint.format
        return chosen == "sharded" or (chosen == "auto" and self.placement.sharded_by_default)

    def checkpoint_state(self) -> dict[str, Any]:
        """Checkpoint content (call on every rank: it gathers every rank's RNG state). With
        ``checkpoint.format: sharded`` the model and optimizer are left out: ``shard_state()``."""
        sharded = self.sharded_checkpoints
        weights = (
            {"shards": True}
            if sharded
            else {"model": self.placement.model_state(), "optimizer": self.placement.optimizer_state(self.optimizer)}
        )
        return {
            **weights,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "sampler": self.sampler.state_dict(),
            "step": self.step,
            "world_size": nd.get_world_size(),
            "rng": nd.all_gather_object(capture_rng()),
            "config": config_to_dict(self.cfg),
            "task": self.task.state_dict(),
            "tracking_ids": dict(self.tracking_ids),
            **self._compression_state(),
        }

    def _compression_state(self) -> dict[str, Any]:
        state = self.placement.compression_state()  # a collective when there is any
        return {} if state is None else {"compression": state}

    def shard_state(self) -> Optional[dict[str, Any]]:
        """This rank's shards of the model and optimizer for a sharded checkpoint; None for a full one."""
        if not self.sharded_checkpoints:
            return None
        return self.placement.shard_state(self.optimizer)

    def release_training_state(self) -> None:
        """Drop the gradients and the optimizer's state: once the last checkpoint is committed they
        are not needed, and the report's whole model then fits in the memory training used."""
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer.state.clear()

    def restore(
        self,
        state: dict[str, Any],
        seed: int,
        step_dir: Optional[Path] = None,
        fill: Optional[Callable[[dict[str, Any]], None]] = None,
    ) -> None:
        """Continue from ``checkpoint_state()`` of a run on any number of ranks (``step_dir``:
        where it was read from, for a sharded checkpoint's shards; ``fill``: instead, what copies
        the shards into this layout's, e.g. a memory snapshot's)."""
        if state.get("shards") and fill is not None:
            self.placement.fill_shards(self.optimizer, fill)
        elif state.get("shards"):
            assert step_dir is not None, "a sharded checkpoint needs its step directory"
            self.placement.load_shards(self.optimizer, step_dir)
        else:
            self.placement.load(self.optimizer, state["model"], state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.sampler.load_state_dict(state["sampler"])
        self.step = int(state["step"])
        self.task.load_state_dict(state.get("task", {}))
        self.tracking_ids = saved_tracking_ids(state)
        rank = nd.get_rank()
        note = self.placement.load_compression_state(state.get("compression"))
        if note is not None and rank == 0:
            print(note, flush=True)
        if state["world_size"] == nd.get_world_size():
            restore_rng(state["rng"][rank])
        else:  # the old per-rank streams mean nothing at another world size
            seed_rank(seed, rank, self.step)


def saved_tracking_ids(state: dict[str, Any]) -> dict[str, str]:
    """A checkpoint's tracking run ids by service; older checkpoints kept the MLflow run's alone."""
    ids = dict(state.get("tracking_ids") or {})
    if state.get("mlflow_run_id"):
        ids.setdefault("mlflow", state["mlflow_run_id"])
    return ids
