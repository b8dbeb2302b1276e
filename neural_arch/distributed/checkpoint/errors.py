"""The checkpoint exceptions: ``CheckpointError`` (users see it), its ``UnsafeCheckpoint``
(a file would have run code when loaded; refused) and ``DamagedCheckpoint`` (one step
directory cannot be loaded; the loaders fall back).

Use: ``except CheckpointError as exc: print(exc)``; the message says what failed, why,
and which checkpoint is still intact.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says which, why, and what is left."""


class UnsafeCheckpoint(CheckpointError):
    """A checkpoint file holds a pickle that would import or call something a checkpoint never
    contains; it was refused before anything in it ran."""


class DamagedCheckpoint(Exception):
    """Why one step directory cannot be loaded (missing or bad manifest, truncated or
    corrupt state file). Caught by the loaders, which fall back to an older checkpoint or
    raise a ``CheckpointError``; users never see it."""


def why_write_failed(exc: BaseException, where: Path) -> str:
    """``exc`` in one line; a full disk as ``no space left on device at WHERE``.

    Why: torch.save reports a full disk as ``unexpected pos 281408 vs 281360`` (the
    ``OSError`` it hit is only the exception's context) and DCP hides it among its per-rank
    failures, so the errno is looked for along the whole chain; the free space of ``where``
    decides when none carries it.
    """
    if _out_of_space(exc) or _no_space_left(where):
        return f"no space left on device at {where}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _out_of_space(exc: BaseException) -> bool:
    pending, seen = [exc], set()
    while pending:
        found = pending.pop()
        if found is None or id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, OSError) and found.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        pending += [found.__cause__, found.__context__]
        for failure in (getattr(found, "failures", None) or {}).values():  # DCP's CheckpointException
            pending.append(failure[0] if isinstance(failure, tuple) else failure)
    return False


def _no_space_left(where: Path) -> bool:
    existing = next((p for p in (where, *where.parents) if p.exists()), None)
    try:
        return existing is not None and os.statvfs(existing).f_bavail == 0
    except OSError:
        return False
