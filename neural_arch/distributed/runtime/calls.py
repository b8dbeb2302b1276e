"""Count the collectives a script itself calls, so a hang can be named in its own terms.

Use: ``@counted("all_reduce")`` on every public collective (``collectives.py``, ``barrier``,
``global_mean_std``), or ``with user_call("all_reduce"): ...``; ``progress()`` -> (calls so far, the call in progress or
None), which the heartbeat publishes. Only the outermost call counts: ``global_mean_std``
calling ``all_gather`` is one call, and the metadata exchange inside ``all_reduce`` is not
one. Torch's own sequence number counts those internal collectives too, so by torch's count
a script's third ``all_reduce`` can read as "collective #5".

A collective that fails inside a user call (a timeout, a closed connection) is re-raised
as ``CollectiveFailed`` whose message names the call and the ranks that did not enter it
(``heartbeat.describe_stragglers``), with torch's error chained as its cause. The count
itself lives in ``call_count.py``, which the heartbeat reads; ``reset``, ``progress`` and
``leaving`` are named here too because the process group uses this module for the whole
lifetime of its calls.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

import torch.distributed as dist

from neural_arch.distributed.runtime.call_count import CollectiveFailed, counting, leaving, progress, reset
from neural_arch.distributed.runtime.heartbeat import describe_stragglers

__all__ = ["CollectiveFailed", "counted", "leaving", "progress", "reset", "user_call"]


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@contextmanager
def user_call(name: str) -> Iterator[None]:
    """Count ``name`` as one call of the script (unless nested in another), and explain a failure."""
    with counting(name) as outer:
        try:
            yield
        except RuntimeError as exc:  # torch's DistBackendError is one
            if not outer or isinstance(exc, CollectiveFailed) or _world_size() == 1:
                raise
            verb = "timed out" if "timed out" in str(exc).lower() or "timeout" in str(exc).lower() else "failed"
            line = describe_stragglers(verb=verb)  # while this call is still the one in progress
            if line is None:
                raise
            raise CollectiveFailed(f"{line} ({type(exc).__name__}: {str(exc).strip().splitlines()[0]})") from exc


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
