"""How many collectives the script itself has called, and which one it is in now.

Use: ``with counting("all_reduce") as outer: ...`` around a public collective (``calls.py``
does this for every one); ``progress()`` -> (calls so far, the call in progress or None),
which the heartbeat publishes; ``reset()`` when a process group starts; ``with leaving():``
around ``destroy_process_group``'s barrier.

Only the outermost call counts: ``global_mean_std`` calling ``all_gather`` is one call. This
state is kept apart from ``calls.py`` because the heartbeat reads it and ``calls.py`` asks the
heartbeat to explain a failed call: in one module, the heartbeat and the calls would import
each other. ``CollectiveFailed`` lives here for the same reason: the desync checker, which the
heartbeat starts, raises a kind of it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional


@dataclass
class _Progress:
    calls: int = 0
    """User-level collective calls entered so far."""
    depth: int = 0
    """How deep in nested user calls the script is now."""
    current: Optional[str] = None
    """The call in progress (or ``destroy_process_group``), None between calls."""


class CollectiveFailed(RuntimeError):
    """A collective failed; the message says which call and which ranks did not arrive."""


CollectiveFailed.__module__ = "neural_arch.distributed"  # tracebacks show the public name


# One per process: the script's calls, read by the heartbeat thread (so not thread-local).
_state = _Progress()


def reset() -> None:
    """Start counting from zero (a new process group: every rank starts together)."""
    _state.calls, _state.depth, _state.current = 0, 0, None


def progress() -> tuple[int, Optional[str]]:
    """(user-level collective calls entered so far, the one in progress or None)."""
    return _state.calls, _state.current


@contextmanager
def counting(name: str) -> Iterator[bool]:
    """Count ``name`` as one call of the script unless nested in another; yields whether it is
    the outermost. ``name`` stays the call in progress until the block has fully exited, so an
    ``except`` inside the block still sees it."""
    outer = _state.depth == 0
    if outer:
        _state.calls += 1
        _state.current = name
    _state.depth += 1
    try:
        yield outer
    finally:
        _state.depth -= 1
        if outer:
            _state.current = None


@contextmanager
def leaving() -> Iterator[None]:
    """Mark this rank as inside ``destroy_process_group`` (its barrier is not a user call)."""
    _state.current = "destroy_process_group"
    try:
        yield
    finally:
        _state.current = None
