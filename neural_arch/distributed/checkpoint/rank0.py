"""The rank-0 protocol: rank 0 writes, every rank learns the outcome, nobody hangs.

Use: ``info = on_rank0(lambda: write(...), "could not write checkpoint step 3")`` on every
rank; all ranks return rank 0's result or raise the same ``CheckpointError``.

Why: DDP state is identical on every rank, so one writer suffices; but if rank 0 raised
alone, the other ranks would wait in their next collective until the process-group
timeout. At world size 1 (or without a process group) it simply calls ``fn``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

from neural_arch.distributed.checkpoint.errors import CheckpointError
from neural_arch.distributed.runtime.collectives import all_gather_object
from neural_arch.distributed.runtime.process_group import get_rank

T = TypeVar("T")


def on_rank0(fn: Callable[[], T], failed: str) -> T:
    """Run ``fn`` on global rank 0; every rank returns its result or raises a ``CheckpointError``.

    ``failed`` prefixes errors that are not already a ``CheckpointError``.

    Why gather the outcome: if rank 0 raised alone, the others would wait in their next
    collective until the process-group timeout. The gather is also the barrier: no rank
    returns before rank 0 has finished.
    """
    outcome: tuple[Optional[BaseException], Any] = (None, None)
    if get_rank() == 0:
        try:
            outcome = (None, fn())
        except CheckpointError as exc:
            outcome = (exc, None)
        except Exception as exc:  # noqa: BLE001 - re-raised below, on every rank
            wrapped = CheckpointError(f"{failed}: {exc}")
            wrapped.__cause__ = exc
            outcome = (wrapped, None)
    error, result = all_gather_object((None if outcome[0] is None else str(outcome[0]), outcome[1]))[0]
    if outcome[0] is not None:
        raise outcome[0]
    if error is not None:
        raise CheckpointError(f"{error} (reported by rank 0)")
    return result
