"""Turn the agent's failure history into a summary a person can act on.

Used by the launcher when a job fails; ``format_failure_summary(records, log_dir)``.
It names each failed rank, its exit code or signal, and the last lines of that rank's
own output for that attempt (from ``rank_N.log``), or its recorded Python traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from neural_arch.distributed.launcher.agent import FailureRecord
from neural_arch.distributed.launcher.log_format import attempt_lines, log_path

TAIL_LINES = 12


def _traceback_tail(message: object) -> list[str]:
    if isinstance(message, dict):
        stack = message.get("extraInfo", {}).get("py_callstack", "")
        if stack:
            return stack.rstrip().splitlines()
    return []


# Errors a rank raises because a PEER died or stalled: effects, not causes.
_PEER_ERRORS = ("connection reset by peer", "connection closed by peer", "connectfullmesh", "timed out",
                "broken pipe", "connection refused")


def _blame(record: FailureRecord) -> int:
    """How likely a failure started the trouble (lower first). Timestamps cannot decide: a
    signal death is stamped when the agent notices it (whole seconds), after the peer that
    already failed because of it wrote its own error file."""
    if record.signal == "SIGTERM":
        return 3  # the launcher stopping the group
    if record.signal is not None:
        return 0  # killed from outside or crashed (SIGKILL, SIGSEGV, SIGABRT, ...)
    text = str(record.message).lower()
    return 2 if any(marker in text for marker in _PEER_ERRORS) else 1


def describe(record: FailureRecord) -> str:
    """``rank 1 (local rank 1, pid 42): killed by signal SIGKILL``."""
    how = f"killed by signal {record.signal}" if record.signal else f"exited with code {record.exitcode}"
    return f"rank {record.rank} (local rank {record.local_rank}, pid {record.pid}): {how}"


def format_failure_summary(
    records: Sequence[FailureRecord], log_dir: Optional[Path], max_restarts: int, show_log_path: bool = True
) -> str:
    """Multi-line summary of every attempt's failures; the first attempt's most likely
    cause (see ``_blame``) is named the root cause."""
    if not records:
        return "neural_arch launcher: the job failed, but no worker failure was recorded."
    ordered = sorted(records, key=lambda r: (r.attempt, _blame(r), r.timestamp))
    attempts = ordered[-1].attempt + 1
    out = [
        f"neural_arch launcher: job failed after {attempts} attempt(s) (max_restarts={max_restarts}).",
        f"  root cause: attempt {ordered[0].attempt}, {describe(ordered[0])}",
    ]
    first_of_attempt: dict[int, FailureRecord] = {}
    for record in ordered:
        first_of_attempt.setdefault(record.attempt, record)
    for record in ordered:
        if record is ordered[0]:
            continue
        # The launcher SIGTERMs the rest of a group once one worker failed.
        collateral = record.signal == "SIGTERM" and first_of_attempt[record.attempt] is not record
        label = "stopped by the launcher" if collateral else "also failed"
        out.append(f"  {label}: attempt {record.attempt}, {describe(record)}")
    for record in ordered:
        out.extend(_last_lines(record, log_dir, show_log_path))
    return "\n".join(out)


def _last_lines(record: FailureRecord, log_dir: Optional[Path], show_log_path: bool) -> list[str]:
    """The tail of what the failed process printed: from its log section, else from its error file."""
    lines: list[str] = []
    source = ""
    if log_dir is not None:
        log = log_path(log_dir, record.rank)
        lines = [line for line in attempt_lines(log, record.pid) if line.strip()]
        source = str(log) if show_log_path else "its output"
    if not lines:
        lines, source = _traceback_tail(record.message), "its error file"
    if not lines:
        return [f"  rank {record.rank}, attempt {record.attempt} printed nothing before it died."]
    return [f"  last lines of rank {record.rank}, attempt {record.attempt} ({source}):",
            *(f"    | {line}" for line in lines[-TAIL_LINES:])]
