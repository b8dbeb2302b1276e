"""What every framework in peers.py trains: one workload's config, model, optimizer, data and records.

Not run on its own: peers_workers.py (the hand-written, Fabric, Accelerate and bare-wrapper
scripts) and peers.py (which also starts ``neural-arch train`` with the same overrides) import it.

Same work for everyone: the model, data and per-sample loss come from the app's ``Task``
(``build_model`` seeds itself, so every script starts from the same weights); the optimizer
and LR schedule are the plain torch objects ``build_optimizer``/``build_scheduler`` return
for the config; each step's global batch is the same slice of the world-size-invariant
sample order (neural_arch's ``DistributedSampler``, computed before the loop), and each
rank takes its strided share, as the trainer does. Each script writes one JSON file per
rank: its pid, rank 0's wall-clock stamp after every step, and the exact global mean loss
of the last step's batch.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from neural_arch.distributed import DistributedSampler
from neural_arch.training.builders import build_optimizer, build_scheduler
from neural_arch.training.config import Config, load_config
from neural_arch.training.registry import task_class
from neural_arch.training.task import Task

WORLD = 2
"""Processes in every run (gloo, 1 thread each)."""
GPT_CONFIG = "configs/gpt.yaml"
GPT_VAL_FRACTION = 0.002
"""The trainer validates the whole split once at its end; 0.002 of the corpus keeps that ~1 s."""
MLP_OVERRIDES = [
    # The comm-bound MLP of compression.py's size: 64 -> 2048 x3 -> 10, 8.55 M parameters.
    "run.task=regression",
    "data.features=64",
    "data.targets=10",
    "model.hidden=2048",
    "model.depth=3",
    "data.num_samples=16384",
    "data.val_samples=64",
    "training.global_batch_size=128",
    "optim.name=sgd",
    "optim.lr=0.01",
    "optim.momentum=0.9",
    "schedule.decay=constant",
    "schedule.warmup_steps=0",
]


def overrides(workload: str, steps: int, data_dir: str) -> list[str]:
    """The config overrides of ``workload`` (``mlp`` or ``gpt``) that every framework shares."""
    common = [f"training.steps={steps}", "training.backend=gloo", f"training.nproc_per_node={WORLD}"]
    if workload == "mlp":
        return MLP_OVERRIDES + common
    if workload == "gpt":
        return [f"data.path={data_dir}/gpt_corpus", f"data.val_fraction={GPT_VAL_FRACTION}"] + common
    raise ValueError(f"--workload {workload!r}: use mlp or gpt")


def config(workload: str, steps: int, data_dir: str) -> tuple[Optional[str], Config, list[str]]:
    """(config file or None, the loaded Config, the overrides) of ``workload``."""
    path = GPT_CONFIG if workload == "gpt" else None
    sets = overrides(workload, steps, data_dir)
    return path, load_config(path, sets, world_size=WORLD), sets


@dataclass
class Setup:
    """One rank's unwrapped model, its optimizer and schedule, and its share of each global batch."""

    cfg: Config
    task: Task
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    shares: list[torch.Tensor]
    global_size: int
    stamps: list[float] = field(default_factory=list)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        return self.task.batch("train", self.shares[step], torch.device("cpu"))

    def clip(self) -> Optional[float]:
        return self.cfg.training.grad_clip


def build(workload: str, steps: int, data_dir: str, rank: int) -> Setup:
    """Everything one rank trains, the same for every framework."""
    torch.set_num_threads(1)
    _, cfg, _ = config(workload, steps, data_dir)
    task = task_class(cfg.run.task)(cfg)
    model = task.build_model()
    optimizer = build_optimizer(cfg, model)
    sampler = DistributedSampler(
        dataset_size=task.train_size,
        batch_size=cfg.training.global_batch_size,
        seed=cfg.run.seed,
        rank=rank,
        num_replicas=WORLD,
    )
    shares: list[torch.Tensor] = []
    while len(shares) < steps:
        shares += [torch.tensor(b, dtype=torch.long) for b in sampler][: steps - len(shares)]
        sampler.set_epoch(sampler.epoch + 1)
    return Setup(cfg, task, model, optimizer, build_scheduler(cfg, optimizer), shares, cfg.training.global_batch_size)


def global_loss(per_sample: torch.Tensor) -> float:
    """The exact mean loss over the whole global batch (every rank calls it)."""
    total = torch.stack([per_sample.detach().double().sum(), torch.tensor(float(len(per_sample)), dtype=torch.float64)])
    dist.all_reduce(total)
    return float(total[0] / total[1])


def write_result(out: str, rank: int, stamps: list[float], loss: float, extra: Optional[dict[str, Any]] = None) -> None:
    """This rank's record for peers.py: pid, per-step wall-clock stamps (rank 0), final loss."""
    record = {"rank": rank, "pid": os.getpid(), "stamps": stamps if rank == 0 else [], "loss": loss, **(extra or {})}
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank_{rank}.json").write_text(json.dumps(record))


def stamp(stamps: list[float]) -> None:
    """Wall clock after a completed step (time.time(): peers.py compares it with the command's start)."""
    stamps.append(time.time())
