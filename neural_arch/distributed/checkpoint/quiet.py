"""Silence DCP's single-process warning around a save or load at world size 1.

Use: ``with quiet_single_process(): dcp.save(state, checkpoint_id=path, no_dist=True)``.

Its own module because both the writer (``sharded.py``) and the safe reader
(``dcp_reader.py``) wrap DCP calls in it, and the writer imports the reader: keeping it in
either of them would make the two import each other.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def quiet_single_process() -> Iterator[None]:
    """Hide DCP's "assuming ... a single process" warning: world size 1 is a supported case here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield
