"""``checkpoint_scope()``: modules called inside recompute their activations in backward.

Use::

    with checkpoint_scope():
        loss = criterion(model(x), y)   # model may be wrapped in DistributedDataParallel
        loss.backward()                 # inside or after the scope

Inside the scope the first module called (past data-parallel wrappers) is the *root*; each
module the root calls directly becomes a checkpointed *segment*, run by
``torch.utils.checkpoint.checkpoint`` (non-reentrant, RNG state preserved, so dropout
replays): only the segment's inputs are kept for backward, and its inner activations are
recomputed when backward reaches it. An ``nn.Sequential`` is looked through, so its
children are the segments. For a transformer the segments are the embedding, each block and
the head: the stored activations drop from every intermediate tensor of every block to one
tensor per block, for about one extra forward pass of compute. Gradients are those of the
same model without the scope (the recomputation repeats the same operations).

How: while the scope is open, ``nn.Module.__call__`` is replaced by a function that decides
whether a call is a segment (the original is restored on exit; scopes nest). This affects
every module called in this process while the scope is open, from any thread. Modules
sharded with FSDP should use the trainer's ``parallel.activation_checkpointing`` instead,
which wraps blocks before they are sharded.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from torch import nn
from torch.utils.checkpoint import checkpoint

from neural_arch.distributed.data_parallel.ddp import DistributedDataParallel

_WRAPPERS = (DistributedDataParallel, nn.parallel.DistributedDataParallel)
"""Modules that only pass the input on to the model they wrap: never the root."""


@dataclass
class _CallStack:
    """Module calls in progress inside one scope, and whether one of them is a segment."""

    depth: int = 0
    in_segment: bool = False
    segments: list[str] = field(default_factory=list)
    """Class names of the segments run, for tests and debugging."""


def _is_segment(module: nn.Module, calls: _CallStack) -> bool:
    return calls.depth >= 1 and not calls.in_segment and not isinstance(module, (nn.Sequential, *_WRAPPERS))


def _scoped_call(original: Callable[..., Any], calls: _CallStack) -> Callable[..., Any]:
    def call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if isinstance(module, _WRAPPERS):
            return original(module, *args, **kwargs)  # the wrapped model is the root
        if _is_segment(module, calls):
            calls.segments.append(type(module).__name__)
            return checkpoint(_run_segment, original, calls, module, *args, use_reentrant=False, **kwargs)
        calls.depth += 1
        try:
            return original(module, *args, **kwargs)
        finally:
            calls.depth -= 1

    return call


def _run_segment(original: Callable[..., Any], calls: _CallStack, module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """A segment's forward, also run again during backward: calls inside it are not segments."""
    outer, calls.in_segment = calls.in_segment, True
    try:
        return original(module, *args, **kwargs)
    finally:
        calls.in_segment = outer


@contextmanager
def checkpoint_scope() -> Iterator[_CallStack]:
    """Checkpoint the direct sub-modules of every model called inside (see the module doc)."""
    original = nn.Module.__call__
    if getattr(original, "_neural_arch_scope", False):  # nested: the outer scope already does it
        yield original._neural_arch_calls  # type: ignore[attr-defined]
        return
    calls = _CallStack()
    scoped = _scoped_call(original, calls)
    scoped._neural_arch_scope = True  # type: ignore[attr-defined]
    scoped._neural_arch_calls = calls  # type: ignore[attr-defined]
    nn.Module.__call__ = scoped  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        nn.Module.__call__ = original  # type: ignore[method-assign]
