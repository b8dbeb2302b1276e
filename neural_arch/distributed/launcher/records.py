"""What the launcher remembers of a failed worker: ``FailureRecord``.

Written by the agent (``agent.py``) for every failed worker of every attempt; read by the
restart policy (``restart_policy.py``) and the failure summary (``failures.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class FailureRecord:
    """One worker's failure in one attempt."""

    attempt: int
    """Which start of the group (0 = the first), as TORCHELASTIC_RESTART_COUNT counts."""
    rank: int
    """Global rank of the worker."""
    local_rank: int
    """Rank of the worker on this node."""
    pid: int
    """Process id of the failed worker (finds its lines in rank_N.log)."""
    exitcode: int
    """Exit code; negative: killed by that signal."""
    signal: Optional[str]
    """Name of the signal that killed it (``SIGKILL``), or None for an exit."""
    message: Any
    """Torch elastic's error record: a dict holding the Python traceback, or a string."""
    timestamp: float
    """When the agent noticed (seconds since the epoch)."""
    stopped_by_launcher: bool = False
    """It was still running when the launcher stopped the group after another worker failed."""
    stop_signal: Optional[int] = None
    """The signal it said it stopped on after saving (neural-arch's trainer; channel.py), or None."""
    usage_error: Optional[str] = None
    """The one line of the usage error it said it exits 2 on (neural-arch's commands; channel.py), or None."""
