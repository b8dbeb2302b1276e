"""Turn the agent's failure history into a summary a person can act on.

Used by the launcher when a job fails; ``format_failure_summary(records, log_dir, max_restarts)``.
It names the rank that most likely started the trouble, its exit code or signal, the
other failures grouped by rank (not one line per attempt), and each distinct piece of
evidence once: a rank's recorded Python traceback, else the last lines of its own output
for that attempt (from ``rank_N.log``). Identical evidence of several ranks or attempts
is printed once under a heading such as ``ranks 0 and 1, attempts 0-1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from neural_arch.distributed.launcher.blame import alike, cause_text, causes, exception_line, how, is_collateral
from neural_arch.distributed.launcher.log_format import attempt_lines, log_path
from neural_arch.distributed.launcher.records import FailureRecord
from neural_arch.distributed.launcher.restart_policy import is_usage_error, peer_marker, recorded_traceback

STACK_FRAMES = 4
"""Innermost frames of a stopped rank's stack shown in the summary (the whole dump is in its log)."""

TAIL_LINES = 12

DUMP_HEADERS = ("Current thread 0x", "Thread 0x")
"""How ``faulthandler`` starts each thread's stack in a dump."""

FATAL_HEADERS = ("Fatal Python error", "Python runtime state")
"""The lines before a crash's own dump (``faulthandler`` on SIGSEGV, SIGABRT ...)."""


def describe(record: FailureRecord) -> str:
    """``rank 1 (local rank 1, pid 42): killed by signal SIGKILL``."""
    return f"rank {record.rank} (local rank {record.local_rank}, pid {record.pid}): {_how(record)}"


def _how(record: FailureRecord) -> str:
    return f"killed by signal {record.signal}" if record.signal else f"exited with code {record.exitcode}"


def numbers(values: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2, 5``."""
    runs: list[list[int]] = []
    for value in sorted(set(values)):
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def who(pairs: Sequence[tuple[int, int]]) -> str:
    """(rank, attempt) pairs -> ``ranks 0 and 1, attempts 0-1; rank 2, attempt 1``."""
    attempts_of: dict[int, list[int]] = {}
    for rank, attempt in pairs:
        attempts_of.setdefault(rank, []).append(attempt)
    ranks_of: dict[str, list[int]] = {}
    for rank, attempts in sorted(attempts_of.items()):
        ranks_of.setdefault(numbers(attempts), []).append(rank)
    parts = []
    for attempts, ranks in ranks_of.items():
        rank_text = (
            f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"
        )
        plural = "attempts" if ("-" in attempts or "," in attempts) else "attempt"
        parts.append(f"{rank_text}, {plural} {attempts}")
    return "; ".join(parts)


def format_failure_summary(
    records: Sequence[FailureRecord],
    log_dir: Optional[Path],
    max_restarts: int,
    show_log_path: bool = True,
    gave_up: Optional[str] = None,
) -> str:
    """Multi-line summary of every attempt's failures; the first attempt's first cause (see
    ``blame.py``) is named the root cause. ``gave_up``: why restarts stopped early."""
    if not records:
        return "neural_arch launcher: the job failed, but no worker failure was recorded."
    ordered = [r for a in sorted({r.attempt for r in records}) for r in causes([r for r in records if r.attempt == a])]
    attempts = ordered[-1].attempt + 1
    out = [f"neural_arch launcher: job failed after {attempts} attempt(s) (max_restarts={max_restarts})."]
    if gave_up:
        out.append(f"  not restarted again: {gave_up}.")
    out.append(_root_cause(ordered))
    out.extend(_others(ordered))
    out.extend(_evidence(ordered, log_dir, show_log_path))
    if log_dir is not None and show_log_path:
        out.append(f"  every rank's whole output: {Path(log_dir) / 'rank_N.log'}")
    return "\n".join(out)


def _root_cause(ordered: Sequence[FailureRecord]) -> str:
    """The first attempt's first cause; every rank at once when they all raised the same error alike."""
    first = ordered[0]
    same = [r for r in ordered if r.attempt == first.attempt]
    head = f"  root cause: attempt {first.attempt}"
    if alike(same) and not is_collateral(first):
        return f"{head}, every rank alike ({who([(r.rank, r.attempt) for r in same])}): {how(first)}"
    return f"{head}, rank {first.rank} (local rank {first.local_rank}, pid {first.pid}): {cause_text(ordered)}"


def usage_error_line(records: Sequence[FailureRecord], log_dir: Optional[Path]) -> Optional[str]:
    """The whole report of a job whose last attempt ended on a usage error (exit code 2, which the
    rank said was one: ``restart_policy.is_usage_error``): one line, instead of a failure summary
    around the rank's one-line message. The message is quoted unless rank 0 printed it on the
    console already (ranks it outpaced are killed before their exit is recorded, so rank 0's own
    last line, the stacks the launcher asked for left out, is what tells). Either way the line says
    a restart would give the same answer. A script's own exit 2 gets the summary, as any failure."""
    last = max((record.attempt for record in records), default=0)
    usage = sorted((r for r in records if r.attempt == last and is_usage_error(r)), key=lambda r: r.rank)
    if not usage:
        return None
    said = usage[0].usage_error or ""
    ranks = ", ".join(str(r.rank) for r in usage)
    line = f"neural_arch launcher: not restarted: rank(s) {ranks} exited with code 2, a usage or configuration error"
    rank0 = [r for r in records if r.attempt == last and r.rank == 0]
    shown = log_dir is not None and rank0 and _last_lines(rank0[0], log_dir, show_log_path=False)[0][-1:] == [said]
    if shown or not said:
        return f"{line} (above); a restart would give the same answer."
    # Rank 0 stopped before its own line reached its log (another rank said it first): quoted, and
    # the same reason given, whichever rank won that race.
    return f"{line} (a restart would give the same answer): {said}"


def _others(ordered: Sequence[FailureRecord]) -> list[str]:
    """One line per (label, rank, how it ended), naming the attempts it happened in."""
    first_of_attempt: dict[int, FailureRecord] = {}
    for record in ordered:
        first_of_attempt.setdefault(record.attempt, record)
    groups: dict[tuple[str, int, int, str], list[int]] = {}
    for record in ordered[1:]:
        # The launcher stops the rest of a group once one worker failed: SIGTERM, or SIGKILL
        # after a crash (agent.py: those it marks).
        collateral = record.stopped_by_launcher or (
            record.signal == "SIGTERM"
            and first_of_attempt[record.attempt] is not record
            and not recorded_traceback(record.message)
        )
        raised = exception_line(record)
        if raised and is_collateral(record):
            label = f"failed as a consequence ({raised.split(':', 1)[0]}: {peer_marker(raised)})"
        else:
            label = "stopped by the launcher" if collateral else "also failed"
        groups.setdefault((label, record.rank, record.local_rank, _how(record)), []).append(record.attempt)
    return [
        f"  {label}: {who([(rank, a) for a in found])} (local rank {local}): {how}"
        for (label, rank, local, how), found in groups.items()
    ]


def _evidence(ordered: Sequence[FailureRecord], log_dir: Optional[Path], show_log_path: bool) -> list[str]:
    """Each distinct traceback or output tail once, headed by every (rank, attempt) that showed it."""
    blocks: dict[tuple[str, ...], tuple[str, list[tuple[int, int]]]] = {}
    silent: list[tuple[int, int]] = []
    consequences: dict[str, list[tuple[int, int]]] = {}
    for record in ordered:
        raised = exception_line(record)
        if raised and is_collateral(record) and record is not ordered[0]:  # an effect: one line, not its traceback
            consequences.setdefault(f"{raised.split(':', 1)[0]}: {peer_marker(raised)}", []).append(
                (record.rank, record.attempt)
            )
            continue
        lines, source = _last_lines(record, log_dir, show_log_path)
        if not lines:
            silent.append((record.rank, record.attempt))
            continue
        blocks.setdefault(tuple(lines), (source, []))[1].append((record.rank, record.attempt))
    out = []
    for lines, (source, pairs) in blocks.items():
        out.append(f"  {who(pairs)} ({source}):")
        out.extend(f"    | {line}" for line in lines)
    if silent:
        out.append(f"  {who(silent)}: printed nothing before it died.")
    where = (
        f"in {Path(log_dir) / 'rank_N.log'}"
        if log_dir is not None and show_log_path
        else "in each rank's log, kept with --log-dir"
    )
    for error, pairs in consequences.items():
        out.append(f"  {who(pairs)}: {error}, a consequence of the failure above (traceback {where})")
    for record in ordered:
        frames = _stopped_at(record, log_dir)
        if frames:
            out.append(f"  rank {record.rank}, attempt {record.attempt} (its main thread when the group was stopped):")
            out.extend(f"    | {line}" for line in frames)
    return out


def _stopped_at(record: FailureRecord, log_dir: Optional[Path]) -> list[str]:
    """The innermost frames of the main thread's stack the rank wrote when the launcher stopped
    its group (worker.py's stack dump), from its log section, without the launcher's own frames;
    [] when it wrote none."""
    if log_dir is None:
        return []
    blocks: list[list[str]] = []
    inside = False  # a dump's block is its header, then "  File" lines, then a blank line
    for line in attempt_lines(log_path(log_dir, record.rank), record.pid):
        if line.startswith(DUMP_HEADERS):
            blocks.append([])
            inside = True
        elif inside and line.startswith("  File "):
            blocks[-1].append(line.strip())
        else:
            inside = False
    main = [frames for frames in blocks if any("/launcher/worker.py" in f for f in frames)]  # the script's thread
    if not main:
        return []
    own = [f for f in main[-1] if "<frozen runpy>" not in f and "/distributed/launcher/" not in f]
    return own[:STACK_FRAMES]


def _last_lines(record: FailureRecord, log_dir: Optional[Path], show_log_path: bool) -> tuple[list[str], str]:
    """The recorded traceback (the same text on every attempt that failed the same way), else
    the tail of what the failed process printed (its log section; even after SIGKILL)."""
    stack = [line for line in recorded_traceback(record.message).rstrip().splitlines() if line.strip()]
    if stack:
        return stack[-TAIL_LINES:], "traceback"
    if log_dir is not None:
        log = log_path(log_dir, record.rank)
        lines = [line for line in without_requested_stacks(attempt_lines(log, record.pid)) if line.strip()]
        if lines:
            return lines[-TAIL_LINES:], f"last lines of {log}" if show_log_path else "last lines of its output"
    return [], ""


def without_requested_stacks(lines: Sequence[str]) -> list[str]:
    """A rank's log lines without the stack dumps the launcher asked for when it stopped the group
    (``stacks.py``): the summary quotes those apart, without the launcher's frames (``_stopped_at``).
    A dump that follows ``Fatal Python error`` (a crash's own, e.g. SIGSEGV) stays."""
    kept: list[str] = []
    inside, crash = False, False
    for line in lines:
        if line.startswith(DUMP_HEADERS):
            inside = True
        elif inside and (line.startswith("  ") or not line.strip()):
            pass  # a frame of the dump, or the blank line after a thread's frames
        else:
            inside = False
            if line.strip():
                crash = line.startswith(FATAL_HEADERS)
        if not inside or crash:
            kept.append(line)
    return kept
