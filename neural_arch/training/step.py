"""The inside of the training loop: forward/backward, the optimizer step, exact validation.

Used by trainer.py, on every rank with its share of the same global batch::

    loss_sum = forward_backward(components, batch, inputs)   # gradients of the global batch's mean
    optimizer_step(components, loss_sum)                     # unscale, clip, step, schedule
    metrics = evaluate(components)                           # the whole validation split, exact

``components`` is the run's ``TrainingComponents``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, ContextManager, Optional

import torch

import neural_arch.distributed as nd
from neural_arch.distributed.parallel.placement.base import OwnStep, Placement
from neural_arch.distributed.parallel.weighting import data_parallel_loss, pad_rows
from neural_arch.training.builders import autocast_context
from neural_arch.training.components import TrainingComponents
from neural_arch.training.snapshot_parts import is_dtensor
from neural_arch.training.typed_config import ConfigError


def forward_backward(
    components: TrainingComponents, batch: nd.IndexBatch, inputs: Optional[list[dict[str, torch.Tensor]]] = None
) -> torch.Tensor:
    """Gradients of one global batch's mean loss on every rank; returns this rank's (loss sum, samples).

    ``inputs``: ``step_inputs(components, batch)`` when the caller built them already (prefetch)."""
    inputs = step_inputs(components, batch) if inputs is None else inputs
    components.optimizer.zero_grad(set_to_none=True)
    components.forward_seconds = 0.0
    own = components.placement.own_step
    if own is not None:
        started = time.perf_counter()
        with _keyed(components, [], why_not=own.why_unkeyed):
            total = _own_step(components, own, batch, inputs[0])
        components.forward_seconds = time.perf_counter() - started
        return total
    return _accumulate(components, batch, inputs)


def optimizer_step(components: TrainingComponents, loss_sum: torch.Tensor) -> None:
    """Unscale, clip and apply the gradients, then advance the LR schedule; a non-finite gradient
    stops or skips the step per ``training.nan_policy`` (``loss_sum`` names the ranks)."""
    placement, scaler = components.placement, components.scaler
    scaler.unscale_(components.optimizer)
    # The gradients were averaged over ranks, so this norm (and the decision below) is the
    # same on every rank without another collective (a pipeline adds its ranks' parts: reduce_norm).
    norm = gradient_norm(placement)  # one read of the gradients (clip_grad_norm_ with inf also rescales)
    if components.cfg.training.grad_clip is not None and torch.isfinite(norm):
        clip_to(
            [q for q in placement.model.parameters() if q.grad is not None], components.cfg.training.grad_clip, norm
        )
    if not torch.isfinite(norm) and not scaler.is_enabled():  # fp16's scaler skips such steps itself
        _non_finite(components, loss_sum)
        return
    scaler.step(components.optimizer)
    scaler.update()
    components.scheduler.step()


def step_inputs(components: TrainingComponents, batch: nd.IndexBatch) -> list[dict[str, torch.Tensor]]:
    """This rank's data for one global batch: one padded dict per micro-batch (a layout with its
    own step, a pipeline: one dict, which its schedule splits). A pure function of the ids, so it
    may run ahead."""
    cfg, placement = components.cfg, components.placement
    ids = torch.tensor(batch, dtype=torch.long)
    with autocast_context(cfg, components.device):  # as the step itself runs (autocast state is per thread)
        if placement.own_step is not None:
            return [components.task.batch("train", ids, components.device)]
        return [
            padded(components.task.batch("train", part, components.device), placement.min_rows)
            for part in _micro_ids(components, batch)
        ]


def _micro_ids(components: TrainingComponents, batch: nd.IndexBatch) -> tuple[torch.Tensor, ...]:
    return torch.tensor_split(torch.tensor(batch, dtype=torch.long), components.cfg.training.grad_accum_steps)


def _accumulate(
    components: TrainingComponents, batch: nd.IndexBatch, inputs: list[dict[str, torch.Tensor]]
) -> torch.Tensor:
    """Forward and backward of this rank's share in ``grad_accum_steps`` parts; (loss sum, samples)."""
    cfg, placement = components.cfg, components.placement
    local = torch.zeros(2, dtype=torch.float64)
    micro = _micro_ids(components, batch)
    for j, (part, rows) in enumerate(zip(micro, inputs)):
        # All but the last micro-batch accumulate locally; the last one averages the total.
        sync = contextlib.nullcontext() if j == len(micro) - 1 else placement.no_sync()
        n = max(len(part), placement.min_rows)  # padding rows get ids no sample has
        ids = part.tolist() + [-1 - i for i in range(n - len(part))]
        with sync, autocast_context(cfg, components.device):
            started = time.perf_counter()
            with _keyed(components, ids):
                per_sample = components.task.loss(placement.model, rows)
            components.forward_seconds += time.perf_counter() - started
            check_loss_shape(per_sample, n)
            # Weighted by the ranks that see different samples, so the data-parallel average is
            # the gradient of the global batch's mean (padding rows, if any, weigh exactly 0).
            loss = data_parallel_loss(
                per_sample, batch.global_size, placement.dp_size, valid=len(part) if placement.min_rows else None
            )
        components.scaler.scale(loss).backward()
        if placement.leader:  # tensor-parallel peers computed the same samples: count them once
            local[0] += per_sample.detach()[: len(part)].double().sum().cpu()
    local[1] = len(batch) if placement.leader else 0
    return local


def _keyed(components: TrainingComponents, ids: list[int], why_not: str = "") -> ContextManager[Any]:
    """Random ops of this forward drawn per sample (keyed_random.py), or left as they are."""
    if components.keyed is None:
        return contextlib.nullcontext()
    return components.keyed.forward(components.step + 1, ids, why_not=why_not)


def check_loss_shape(per_sample: Any, rows: int) -> None:
    """One line (exit 2, no restart) when ``Task.loss`` did not return one loss per sample: a
    scalar or a per-token loss would train silently with wrong weights, or fail obscurely."""
    shape = tuple(per_sample.shape) if isinstance(per_sample, torch.Tensor) else None
    if shape == (rows,):
        return
    got = f"shape {list(shape)}" if shape is not None else f"a {type(per_sample).__name__}"
    hint = (
        "a scalar is a batch mean (e.g. Hugging Face's outputs.loss), which cannot be weighted exactly; compute it "
        "from the logits with reduction='none'"
        if shape == ()
        else "reduce the other dimensions per sample, e.g. F.cross_entropy(logits.transpose(1, 2), y, "
        "reduction='none').mean(1)"
    )
    raise ConfigError(
        f"Task.loss returned {got} for a micro-batch of {rows} samples; it must return one loss per sample, "
        f"shape [{rows}]: {hint} (docs/custom-app.md, the loss)"
    )


def _own_step(
    components: TrainingComponents, own: OwnStep, batch: nd.IndexBatch, rows: dict[str, torch.Tensor]
) -> torch.Tensor:
    """The layout's own schedule of forwards and backwards over this rank's share; (loss sum, samples)."""
    placement, task = components.placement, components.task
    with autocast_context(components.cfg, components.device):
        inputs, targets = task.split_batch(rows)
        # Micro-batches are the schedule's; each loss is weighted by the global batch (step.py of the library).
        total = own.run(inputs, targets, batch.global_size)
    if not placement.leader:  # pipeline and tensor peers return the same sum: count it once
        return torch.zeros(2, dtype=torch.float64)
    return torch.tensor([total, float(len(batch))], dtype=torch.float64)


def gradient_norm(placement: Placement) -> torch.Tensor:
    """The 2-norm of the whole model's gradient, the same on every rank."""
    return placement.reduce_norm(total_norm([q.grad for q in placement.norm_parameters() if q.grad is not None]))


def padded(batch: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    """``batch`` with zero rows appended up to ``rows`` (sharded layouts cannot run on none)."""
    if not rows or all(len(t) >= rows for t in batch.values()):
        return batch
    return {key: pad_rows(t, rows) for key, t in batch.items()}


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients together; sharded (DTensor) ones count every shard once."""
    if not any(is_dtensor(g) for g in grads):
        return torch.nn.utils.get_total_norm(grads)
    norms = [torch.linalg.vector_norm(g) for g in grads]
    return torch.linalg.vector_norm(torch.stack([n.full_tensor() if is_dtensor(n) else n for n in norms]))


def clip_to(params: list[torch.Tensor], max_norm: float, norm: torch.Tensor) -> None:
    """Scale the gradients of ``params`` so that their total norm is at most ``max_norm`` (as
    clip_grad_norm_). Parameters, not gradients: torch's function reads ``p.grad`` and skips a
    tensor without one, so given the gradients themselves it silently scaled nothing."""
    grads = [p.grad for p in params if p.grad is not None]
    if not any(is_dtensor(g) for g in grads):
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        return
    scale = min(1.0, max_norm / (float(norm) + 1e-6))  # torch's formula; a plain float suits every shard
    for g in grads:
        g.mul_(scale)


def _non_finite(components: TrainingComponents, local: torch.Tensor) -> None:
    """Stop (naming the step and ranks) or skip the step, identically on every rank."""
    sums = [float(s[0]) for s in nd.all_gather(local, check=False)]
    bad = [r for r, s in enumerate(sums) if not torch.isfinite(torch.tensor(s))]
    where = f"non-finite loss on rank(s) {bad}" if bad else "finite losses but non-finite gradients"
    if components.cfg.training.nan_policy == "stop":
        raise FloatingPointError(
            f"training diverged at step {components.step + 1} ({where}); lower optim.lr, set training.grad_clip, "
            "or set training.nan_policy=skip to skip such steps."
        )
    components.optimizer.zero_grad(set_to_none=True)
    components.scheduler.step()


@torch.no_grad()
def evaluate(components: TrainingComponents) -> dict[str, float]:
    """Exact global validation metrics: the task's sums over every rank's share, no padding.

    ``training.val_batches``: only the split's first that many global batches, in order (a
    subset that does not depend on the number of ranks)."""
    task, cfg, placement = components.task, components.cfg, components.placement
    if task.val_size == 0:
        return {}
    size = task.val_size
    if cfg.training.val_batches is not None:
        size = min(size, cfg.training.val_batches * cfg.training.global_batch_size)
    sampler = nd.DistributedSampler(
        dataset_size=size,
        batch_size=cfg.training.global_batch_size,
        shuffle=False,
        rank=placement.dp_rank,
        num_replicas=placement.dp_size,
    )
    placement.model.eval()
    sums = None
    with placement.evaluation():  # FSDP: gathered once for all batches, where it fits
        for batch in sampler:
            with autocast_context(cfg, components.device):
                ids = torch.tensor(batch, dtype=torch.long)
                part = task.eval_sums(
                    placement.plain, padded(task.batch("val", ids, components.device), placement.min_rows)
                )
            if not placement.leader or len(ids) == 0:
                part = torch.zeros_like(part)  # a padding row or a tensor peer's copy of the leader's sums
            sums = part if sums is None else sums + part
    placement.model.train()
    return task.finalize(nd.all_reduce(sums, check=False))
