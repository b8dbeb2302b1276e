"""torch elastic's own log lines, off unless asked for: ``with torch_elastic_logs(verbose): ...``.

Used by ``DistributedLauncher`` around a job; ``--verbose`` on the launcher's command line
shows them (at torch's own level: WARNING, or what ``LOGLEVEL`` says, as under torchrun).

Why: torch's agent logs every worker it stops and every failure it sees
(``W1125 12:00:00.123 ... api.py:1028] Sending process 42 closing signal SIGTERM``,
``E1125 ... api.py:1002] failed (exitcode: 1) local_rank: 0 ...``), lines that repeat what
the ranks' tracebacks and the launcher's failure summary say, with the launcher's file
names and pids instead of the user's. The launcher's own messages are not torch's and stay.

How: every torch elastic module logs to its own logger with its own level, below the
``torch.distributed.elastic`` logger; torch's handler sits higher up, on ``torch``. Stopping
the records at ``torch.distributed.elastic`` (no propagation, a handler that drops them, so
that Python's last-resort stderr handler does not take over) hides them all, including
loggers created later, and is undone when the block ends.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

TORCH_ELASTIC = "torch.distributed.elastic"


@contextmanager
def torch_elastic_logs(verbose: bool) -> Iterator[None]:
    """Within the block, torch elastic's log records reach no handler unless ``verbose``."""
    if verbose:
        yield
        return
    logger = logging.getLogger(TORCH_ELASTIC)
    sink = logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(sink)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(sink)
        logger.propagate = propagate
