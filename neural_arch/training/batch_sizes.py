"""Does the global batch split evenly over the ranks and micro-batches? One-line errors.

Used by config.py's ``validate_config``: ``check_batch_sizes(cfg.training, world_size, dp_ranks)``.
"""

from __future__ import annotations

from typing import Optional, Protocol

from neural_arch.training.typed_config import ConfigError


class BatchSettings(Protocol):
    """The two ``training:`` fields checked here; ``TrainingConfig`` is one. A protocol rather
    than ``TrainingConfig`` itself, because config.py imports this module."""

    global_batch_size: int
    grad_accum_steps: int


def check_batch_sizes(
    training: BatchSettings, world_size: Optional[int], dp_ranks: Optional[int], microbatches: int = 1
) -> None:
    """``dp_ranks``: the ranks that share each global batch (the world, or a layout's dp_size);
    ``microbatches``: a pipeline's parts of each share."""
    if training.global_batch_size % training.grad_accum_steps:
        raise ConfigError(
            f"training.global_batch_size={training.global_batch_size} is not divisible by training."
            f"grad_accum_steps={training.grad_accum_steps}; use a multiple of {training.grad_accum_steps}"
        )
    if world_size is not None and world_size < 1:
        raise ConfigError(f"world_size={world_size!r}: must be >= 1")
    parts = (
        (training.grad_accum_steps, "grad_accum_steps")
        if microbatches == 1
        else (microbatches, "parallel.microbatches")
    )
    unit = (dp_ranks or 1) * parts[0]
    who = f"world size {world_size}" if dp_ranks == world_size else f"parallel dp_size {dp_ranks}"
    if training.global_batch_size % unit:
        raise ConfigError(
            f"training.global_batch_size={training.global_batch_size} is not divisible by {who} "
            f"x {parts[1]} {parts[0]}; use a multiple of {unit}"
        )
