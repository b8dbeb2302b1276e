"""Activation checkpointing per block: ``apply_activation_checkpointing(model.blocks, every=1)``.

Use: before ``apply_fsdp`` (FSDP's hooks then sit outside the recomputed region, as in
torchtitan). ``every=1`` recomputes every block's activations in backward instead of
storing them, ``every=k`` blocks 0, k, 2k, ..., ``every=0`` changes nothing.

Each chosen block's ``forward`` is replaced on the instance by one that runs the original
through ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``. Unlike wrapping the
block in another module, this keeps every parameter name (and so checkpoints, optimizer
state and tensor-parallel plans) unchanged. The recomputation draws what the forward drew:
keyed per-sample draws (keyed_random.py) replay their call numbers, the process's RNG state
is restored for the rest, so dropout masks and gradients equal those without checkpointing.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from torch import nn
from torch.utils.checkpoint import checkpoint

from neural_arch.distributed.data_parallel.keyed_random import recompute_contexts

_MARK = "_neural_arch_checkpointed"


def apply_activation_checkpointing(blocks: Sequence[nn.Module], every: int, first_index: int = 0) -> list[int]:
    """Checkpoint blocks 0, every, 2*every, ... (none for ``every=0``); returns their positions in ``blocks``.

    ``first_index`` is the model-wide index of ``blocks[0]`` (a pipeline stage's first block),
    so "every k-th block" means the same blocks however the model is split.
    """
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(
            f"activation_checkpointing={every!r} must be 0 (none), 1 (every block) or k > 1 (every k-th block)"
        )
    if every == 0:
        return []
    chosen = [i for i in range(len(blocks)) if (first_index + i) % every == 0]
    for i in chosen:
        block = blocks[i]
        if getattr(block, _MARK, False):
            raise ValueError(f"block {i} already has activation checkpointing; apply it once")
        block.forward = _checkpointed(block.forward)  # type: ignore[method-assign]
        setattr(block, _MARK, True)
    return chosen


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, context_fn=recompute_contexts, **kwargs)

    return run
