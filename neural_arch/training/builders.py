"""Small ``build_*`` functions that turn a Config into the trainer's parts.

Used by the trainer; each can be called on its own, e.g.
``build_optimizer(load_config("configs/tiny.yaml"), model)``. The model and data come from
the application's ``Task``, not from here.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, ContextManager

import torch
from torch import nn

from neural_arch.training.config import Config
from neural_arch.training.lazy_dynamo import defer_dynamo_imports

PARAM_DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.float32, "fp16": torch.float32}
"""Parameter dtype per precision: bf16/fp16 keep fp32 master weights and autocast."""


def build_optimizer(cfg: Config, model: nn.Module) -> torch.optim.Optimizer:
    """SGD (with momentum), Adam or AdamW as configured."""
    defer_dynamo_imports()  # an eager run needs no compiler: 2-4 s of imports saved (lazy_dynamo.py)
    optim = cfg.optim
    if optim.name == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay
        )
    cls = torch.optim.Adam if optim.name == "adam" else torch.optim.AdamW
    return cls(model.parameters(), lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay)


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
    schedule, total = cfg.schedule, cfg.training.steps
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total, schedule.warmup_steps, schedule.decay, schedule.min_lr_ratio)
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


def compile_blocks(model: nn.Module) -> int:
    """``torch.compile`` every item of every ``nn.ModuleList`` in ``model`` (its repeated blocks),
    or the whole model when it has none; returns how many modules were compiled.

    In place (``Module.compile``), so parameter names, state dicts and checkpoints are those of
    the eager model, and a DDP wrapper built around ``model`` before or after keeps working:
    its gradient hooks sit on the parameters, which compiled blocks still update. Per-block
    regions compile once per distinct block shape and leave the glue between blocks eager.
    """
    blocks: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        inside = any(name.startswith(outer + ".") for outer in blocks)  # a list inside a block compiles with it
        if isinstance(module, nn.ModuleList) and not inside:
            blocks.update((f"{name}.{i}", block) for i, block in enumerate(module))
    for block in list(blocks.values()) or [model]:
        block.compile()
    return len(blocks) or 1
