"""One optimizer step and one exact validation pass: the inside of the training loop.

Used by trainer.py: ``train_step(parts, batch)`` and ``evaluate(parts)``; ``parts`` is a
``TrainingComponents``. Every rank calls them with its share of the same global batch.
"""

from __future__ import annotations

import contextlib

import torch

import neural_arch.distributed as nd
from neural_arch.training.builders import autocast_context
from neural_arch.training.components import TrainingComponents


def train_step(parts: TrainingComponents, batch: nd.IndexBatch) -> torch.Tensor:
    """One optimizer step on one global batch; returns this rank's (loss sum, samples)."""
    cfg = parts.cfg
    parts.optimizer.zero_grad(set_to_none=True)
    ids = torch.tensor(batch, dtype=torch.long)
    local = torch.zeros(2, dtype=torch.float64)
    micro = torch.tensor_split(ids, cfg.training.grad_accum_steps)
    for j, part in enumerate(micro):
        # All but the last micro-batch accumulate locally; the last one averages the total.
        sync = contextlib.nullcontext() if j == len(micro) - 1 else parts.model.no_sync()
        with sync, autocast_context(cfg, parts.device):
            per_sample = parts.task.loss(parts.model, parts.task.batch("train", part, parts.device))
            loss = nd.global_batch_loss(per_sample, batch.global_size)
        parts.scaler.scale(loss).backward()
        local[0] += per_sample.detach().double().sum().cpu()
    local[1] = len(batch)
    parts.scaler.unscale_(parts.optimizer)
    # The gradients were averaged over ranks, so this norm (and the decision below) is the
    # same on every rank without another collective.
    grads = [q.grad for q in parts.model.parameters() if q.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)  # one read of the gradients (clip_grad_norm_ with inf also rescales)
    if cfg.training.grad_clip is not None and torch.isfinite(norm):
        torch.nn.utils.clip_grads_with_norm_(parts.model.parameters(), cfg.training.grad_clip, norm)
    if not torch.isfinite(norm) and not parts.scaler.is_enabled():  # fp16's scaler skips such steps itself
        _non_finite(parts, local)
        return local
    parts.scaler.step(parts.optimizer)
    parts.scaler.update()
    parts.scheduler.step()
    return local


def _non_finite(parts: TrainingComponents, local: torch.Tensor) -> None:
    """Stop (naming the step and ranks) or skip the step, identically on every rank."""
    sums = [float(s[0]) for s in nd.all_gather(local, check=False)]
    bad = [r for r, s in enumerate(sums) if not torch.isfinite(torch.tensor(s))]
    where = f"non-finite loss on rank(s) {bad}" if bad else "finite losses but non-finite gradients"
    if parts.cfg.training.nan_policy == "stop":
        raise FloatingPointError(
            f"training diverged at step {parts.step + 1} ({where}); lower optim.lr, set training.grad_clip, "
            "or set training.nan_policy=skip to skip such steps."
        )
    parts.optimizer.zero_grad(set_to_none=True)
    parts.scheduler.step()


@torch.no_grad()
def evaluate(parts: TrainingComponents) -> dict[str, float]:
    """Exact global validation metrics: the task's sums over every rank's share, no padding."""
    task, cfg = parts.task, parts.cfg
    if task.val_size == 0:
        return {}
    sampler = nd.DistributedSampler(dataset_size=task.val_size, batch_size=cfg.training.global_batch_size, shuffle=False)
    parts.model.eval()
    sums = None
    for batch in sampler:
        with autocast_context(cfg, parts.device):
            ids = torch.tensor(batch, dtype=torch.long)
            part = task.eval_sums(parts.model.module, task.batch("val", ids, parts.device))
        sums = part if sums is None else sums + part
    parts.model.train()
    return task.finalize(nd.all_reduce(sums, check=False))
