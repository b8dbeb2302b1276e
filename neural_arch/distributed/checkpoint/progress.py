"""Tell listeners in this process that a checkpoint was committed: the launcher's restart
policy uses it as its progress signal.

Use: ``on_checkpoint_saved(lambda where: print("saved", where))``; ``save_checkpoint`` and
``save_sharded`` call ``checkpoint_saved(path)`` on every rank once the write is complete.

Why: the launcher restarts a failed group only if restarting can help. A failure that
repeats identically after the run saved a new checkpoint is progress (the next attempt
starts later); without one it is a deterministic bug. Under our launcher ``checkpoint_saved``
tells it through the launcher's channel (``launcher/channel.py``); elsewhere that does nothing.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

Listener = Callable[[Path], None]

# Listeners of this process (tests, a user's code); a list, not a registry
# keyed by name: the only use is "somebody wants to know".
_listeners: list[Listener] = []


def on_checkpoint_saved(listener: Listener) -> None:
    """Call ``listener(path of the committed checkpoint)`` after every successful save."""
    _listeners.append(listener)


def checkpoint_saved(path: Path) -> None:
    """Called by the save functions; a failing listener warns but never fails the save."""
    from neural_arch.distributed.launcher.channel import PROGRESS, tell  # here: the launcher package imports this one

    tell(PROGRESS, Path(path).name)  # the restart line quotes its name (step_00000100)
    for listener in list(_listeners):
        try:
            listener(path)
        except Exception as exc:  # noqa: BLE001 - the checkpoint is safe on disk either way
            warnings.warn(
                f"checkpoint {path} saved, but a progress listener failed ({exc})", RuntimeWarning, stacklevel=2
            )
