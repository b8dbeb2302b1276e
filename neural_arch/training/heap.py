"""Keep the garbage collector's full passes off the training loop's objects from set-up.

Used by trainer.py: ``with frozen_heap(): <training loop>``.

By the time the loop starts, a process holds a few hundred thousand long-lived Python
objects (torch, the model, the task, the data store). CPython's full collection walks all
of them whenever enough new objects have survived: on the sea-ice U-Net such a pass costs
about a step and a half, every few hundred steps. On one rank that is a small loss; on
several ranks each pause lands at a different step and every other rank waits for it at
the next all-reduce. ``gc.freeze()`` moves the set-up's objects out of the collector's
view, so a full pass only walks what the loop itself made, a small fraction of that.
Nothing is numerically different: the collector only frees memory.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the objects that exist now for the ``with`` body; unfreeze them afterwards.

    Unfreezing matters when ``train()`` runs more than once in a process (tests, notebooks):
    the earlier runs' objects become collectable again instead of staying frozen for good.
    Frozen objects are still freed when their last reference goes; only reference cycles
    among them wait for the unfreeze.
    """
    # Young cyclic garbage from set-up is collected first (cheap), so it is not kept for the
    # whole run; a full collection at this point would walk every set-up object once more.
    gc.collect(1)
    already = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if already == 0:  # a caller's own freeze (e.g. before forking workers) is left as it was
            gc.unfreeze()
