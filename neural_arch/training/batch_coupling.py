"""Layers that couple the samples of a batch (BatchNorm): made exact at placement, or refused.

Used by placement.py right after the task's model is built, on every rank::

    exact_batch_coupling(model, cfg, layout)   # layout: the ``parallel:`` section, None for DDP

Every ``nn.BatchNorm1d/2d/3d`` and ``nn.SyncBatchNorm`` becomes its exact class
(``distributed/data_parallel/batch_norm.py``): in training its statistics are those of the whole
global batch over every rank, as one process would compute them; names, parameters, buffers and
checkpoints are unchanged. Where no rank can see the global batch at once, the run stops before
its first step with one ``ConfigError`` line (exit 2 from the CLI, no restart) naming the module,
the reason and the fix: ``training.grad_accum_steps > 1`` (micro-batches run one after
another), pipeline (``parallel.pp > 1``) and tensor-parallel (``parallel.tp > 1``) layouts, a
BatchNorm subclass the framework cannot synchronise, and ``track_running_stats=False``.
"""

from __future__ import annotations

from typing import Optional

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from neural_arch.distributed.data_parallel.batch_norm import EXACT_CLASSES, make_exact
from neural_arch.distributed.parallel.layout import ParallelLayout
from neural_arch.training.config import Config
from neural_arch.training.typed_config import ConfigError

_OTHER_NORMS = "or use nn.GroupNorm / nn.LayerNorm, which treat every sample on its own"


def batch_coupled(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(path, module) of every layer whose training output depends on the other samples of its batch."""
    return [(name, module) for name, module in model.named_modules() if isinstance(module, _BatchNorm)]


def exact_batch_coupling(model: nn.Module, cfg: Config, layout: Optional[ParallelLayout] = None) -> int:
    """Make every batch-coupled layer of ``model`` exact over the global batch, in place; returns
    how many. A one-line ``ConfigError`` instead when this run cannot make them exact."""
    found = batch_coupled(model)
    for path, module in found:
        why = _refusal(module, cfg, layout)
        if why is not None:
            others = f" (and {len(found) - 1} more such layer(s))" if len(found) > 1 else ""
            raise ConfigError(
                f"model.{path or '(root)'} ({type(module).__name__}){others} normalises each sample by the "
                f"statistics of its batch: {why}"
            )
    for _, module in found:
        make_exact(module)  # every rank of the step holds different samples: the default group
    return len(found)


def _refusal(module: nn.Module, cfg: Config, layout: Optional[ParallelLayout]) -> Optional[str]:
    """Why this run cannot give ``module`` the global batch's statistics, and the fix; None if it can."""
    if type(module) not in EXACT_CLASSES:
        return (
            "the trainer synchronises nn.BatchNorm1d/2d/3d and nn.SyncBatchNorm, not this subclass; "
            f"build the model with one of those, {_OTHER_NORMS}"
        )
    if not getattr(module, "track_running_stats", True):
        return (
            "with track_running_stats=False it uses batch statistics in evaluation too, so validation "
            f"and the report would depend on the split; set track_running_stats=True, {_OTHER_NORMS}"
        )
    accum = cfg.training.grad_accum_steps
    if accum > 1:
        return (
            f"training.grad_accum_steps={accum} runs each step as micro-batches one after another, so no "
            f"forward sees the global batch; set training.grad_accum_steps=1, {_OTHER_NORMS}"
        )
    if layout is not None and layout.pp > 1:
        return (
            f"parallel.pp={layout.pp} runs the step as pipeline micro-batches one after another; "
            f"set parallel.pp=1 (dp_shard/dp_replicate are exact), {_OTHER_NORMS}"
        )
    if layout is not None and layout.tp > 1:
        return (
            f"parallel.tp={layout.tp}: batch statistics are not synchronised under tensor parallelism; "
            f"set parallel.tp=1 (dp_shard/dp_replicate are exact), {_OTHER_NORMS}"
        )
    return None
