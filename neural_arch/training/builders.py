"""Small ``build_*`` functions that turn a Config into the trainer's parts.

Used by trainer.py; each can be called on its own, e.g.
``build_model(load_config("configs/tiny.yaml"))``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, ContextManager

import torch
from torch import nn

from neural_arch.data.synthetic import load_arrays, make_regression
from neural_arch.models.mlp import MLP
from neural_arch.training.config import Config

PARAM_DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.float32, "fp16": torch.float32}
"""Parameter dtype per precision: bf16/fp16 keep fp32 master weights and autocast."""


@dataclass(frozen=True)
class Datasets:
    """Train and validation tensors (the full arrays: ranks index them via the sampler)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor


def build_datasets(cfg: Config) -> Datasets:
    """Deterministic synthetic data, or x/y from ``data.path``; split train | validation."""
    d = cfg.data
    if d.name == "file":
        x, y = load_arrays(d.path)  # type: ignore[arg-type]
    else:
        x, y = make_regression(d.num_samples + d.val_samples, d.features, d.targets, d.noise, seed=cfg.run.seed)
    n_val = d.val_samples if d.name == "synthetic" else max(0, min(d.val_samples, len(x) - 1))
    dtype = PARAM_DTYPES[cfg.training.precision]
    x, y = x.to(dtype), y.to(dtype)
    return Datasets(x[: len(x) - n_val], y[: len(y) - n_val], x[len(x) - n_val :], y[len(y) - n_val :])


def build_model(cfg: Config, data: Datasets) -> nn.Module:
    """The configured model, with the same initial weights on every rank (seeded)."""
    torch.manual_seed(cfg.run.seed)
    model = MLP(features=data.train_x.shape[1], targets=data.train_y.shape[1], hidden=cfg.model.hidden, depth=cfg.model.depth)
    return model.to(PARAM_DTYPES[cfg.training.precision])


def build_optimizer(cfg: Config, model: nn.Module) -> torch.optim.Optimizer:
    """SGD (with momentum), Adam or AdamW as configured."""
    o = cfg.optim
    if o.name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    cls = torch.optim.Adam if o.name == "adam" else torch.optim.AdamW
    return cls(model.parameters(), lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)


def lr_factor(step: int, total: int, warmup: int, decay: str, min_ratio: float) -> float:
    """Linear warmup over ``warmup`` steps, then cosine down to ``min_ratio`` (or constant)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if decay == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(cfg: Config, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-step LR schedule (warmup + cosine) as a LambdaLR whose state is checkpointable."""
    s, total = cfg.schedule, cfg.training.steps
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total, s.warmup_steps, s.decay, s.min_lr_ratio)
    )


def autocast_context(cfg: Config, device: torch.device) -> ContextManager[Any]:
    """bf16/fp16 autocast on the device, or nothing for fp32/fp64."""
    precision = cfg.training.precision
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        if precision == "fp16" and device.type != "cuda":
            raise ValueError("training.precision=fp16 needs a CUDA device; use bf16 on CPU.")
        return torch.autocast(device_type=device.type, dtype=dtype)
    return contextlib.nullcontext()


def build_scaler(cfg: Config, device: torch.device) -> torch.amp.GradScaler:
    """Loss scaler: active only for fp16 on CUDA (the others need none)."""
    return torch.amp.GradScaler(device.type, enabled=cfg.training.precision == "fp16" and device.type == "cuda")
