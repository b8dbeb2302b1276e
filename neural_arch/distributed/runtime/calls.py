"""Count the collectives a script itself calls, so a hang can be named in its own terms.

Use: ``@counted("all_reduce")`` on every public collective (``collectives.py``, ``barrier``,
``global_mean_std``), or ``with user_call("all_reduce"): ...``; ``progress()`` -> (calls so far, the call in progress or
None), which the heartbeat publishes. Only the outermost call counts: ``global_mean_std``
calling ``all_gather`` is one call, and the metadata exchange inside ``all_reduce`` is not
one. Torch's own sequence number counts those internal collectives too, which is why a
script with 3 ``all_reduce`` calls used to read as "collective #5".

A collective that fails inside a user call (a timeout, a closed connection) is re-raised
as ``CollectiveFailed`` whose message names the call and the ranks that did not enter it
(``heartbeat.describe_stragglers``), with torch's error chained as its cause.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, TypeVar

import torch.distributed as dist


class CollectiveFailed(RuntimeError):
    """A collective failed; the message says which call and which ranks did not arrive."""


CollectiveFailed.__module__ = "neural_arch.distributed"  # tracebacks show the public name


@dataclass
class _Progress:
    calls: int = 0
    """User-level collective calls entered so far."""
    depth: int = 0
    """How deep in nested user calls the script is now."""
    current: Optional[str] = None
    """The call in progress (or ``destroy_process_group``), None between calls."""


# One per process: the script's calls, read by the heartbeat thread (so not thread-local).
_state = _Progress()


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def reset() -> None:
    """Start counting from zero (a new process group: every rank starts together)."""
    _state.calls, _state.depth, _state.current = 0, 0, None


def progress() -> tuple[int, Optional[str]]:
    """(user-level collective calls entered so far, the one in progress or None)."""
    return _state.calls, _state.current


@contextmanager
def user_call(name: str) -> Iterator[None]:
    """Count ``name`` as one call of the script (unless nested in another), and explain a failure."""
    outer = _state.depth == 0
    if outer:
        _state.calls += 1
        _state.current = name
    _state.depth += 1
    try:
        yield
    except RuntimeError as exc:  # torch's DistBackendError is one
        if not outer or isinstance(exc, CollectiveFailed) or _world_size() == 1:
            raise
        from neural_arch.distributed.runtime.heartbeat import describe_stragglers  # it imports this module

        verb = "timed out" if "timed out" in str(exc).lower() or "timeout" in str(exc).lower() else "failed"
        line = describe_stragglers(verb=verb)
        if line is None:
            raise
        raise CollectiveFailed(f"{line} ({type(exc).__name__}: {str(exc).strip().splitlines()[0]})") from exc
    finally:
        _state.depth -= 1
        if outer:
            _state.current = None


F = TypeVar("F", bound=Callable[..., Any])


def counted(name: str) -> Callable[[F], F]:
    """Decorator: the function is one user-level collective call ``name`` (see ``user_call``)."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            with user_call(name):
                return fn(*args, **kwargs)
        return call  # type: ignore[return-value]
    return wrap


@contextmanager
def leaving() -> Iterator[None]:
    """Mark this rank as inside ``destroy_process_group`` (its barrier is not a user call)."""
    _state.current = "destroy_process_group"
    try:
        yield
    finally:
        _state.current = None
