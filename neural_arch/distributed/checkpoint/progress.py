"""Tell listeners in this process that a checkpoint was committed: the launcher's restart
policy uses it as its progress signal.

Use: ``on_checkpoint_saved(lambda where: print("saved", where))``; ``save_checkpoint`` and
``save_sharded`` call ``checkpoint_saved(path)`` on every rank once the write is complete.

Why: the launcher restarts a failed group only if restarting can help. A failure that
repeats identically after the run saved a new checkpoint is progress (the next attempt
starts later); without one it is a deterministic bug. The launcher's worker wrapper
(``launcher/worker.py``) listens and leaves a marker file the launcher can see.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

Listener = Callable[[Path], None]

# Listeners of this process (the worker wrapper registers one); a list, not a registry
# keyed by name: the only use is "somebody wants to know".
_listeners: list[Listener] = []


def on_checkpoint_saved(listener: Listener) -> None:
    """Call ``listener(path of the committed checkpoint)`` after every successful save."""
    _listeners.append(listener)


def checkpoint_saved(path: Path) -> None:
    """Called by the save functions; a failing listener warns but never fails the save."""
    for listener in list(_listeners):
        try:
            listener(path)
        except Exception as exc:  # noqa: BLE001 - the checkpoint is safe on disk either way
            warnings.warn(
                f"checkpoint {path} saved, but a progress listener failed ({exc})", RuntimeWarning, stacklevel=2
            )
