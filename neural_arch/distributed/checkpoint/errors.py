"""The checkpoint exceptions: ``CheckpointError`` (users see it), its ``UnsafeCheckpoint``
(a file would have run code when loaded; refused) and ``DamagedCheckpoint`` (one step
directory cannot be loaded; the loaders fall back).

Use: ``except CheckpointError as exc: print(exc)``; the message says what failed, why,
and which checkpoint is still intact.
"""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says which, why, and what is left."""


class UnsafeCheckpoint(CheckpointError):
    """A checkpoint file holds a pickle that would import or call something a checkpoint never
    contains; it was refused before anything in it ran."""


class DamagedCheckpoint(Exception):
    """Why one step directory cannot be loaded (missing or bad manifest, truncated or
    corrupt state file). Caught by the loaders, which fall back to an older checkpoint or
    raise a ``CheckpointError``; users never see it."""
