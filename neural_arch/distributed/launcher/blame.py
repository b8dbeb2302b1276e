"""Which failure of an attempt is its cause, which ones are only its effects, and where it happened.

Used by the failure summary (``failures.py``) and the agent's one-line restart notice::

    causes(records)          # the attempt's failures, the root cause first
    is_collateral(record)    # True: an effect of another rank's failure
    where(record)            # "train.py:12 in step (in torch/nn/functional.py:3104 in mse_loss)"
    restart_notice(records, "vm", "step 100", next_attempt=2, attempts=4)   # one line

The rules. A rank that raised because a peer died or stalled (gloo's "Connection reset by
peer" or "Connection closed by peer", a broken pipe, NCCL's aborted communicator, a
collective timeout: ``restart_policy.PEER_ERRORS``) is *collateral*, and so is a rank the
launcher stopped (SIGTERM, or SIGKILL after a crash) before it failed on its own. Every
other failure is a *cause*: a fatal signal from outside (SIGKILL, SIGSEGV, the OOM killer),
an exception of the program's own, a non-zero exit. The root cause is the cause that
happened first, by the time the worker recorded its exception (``crash_report.py``, to the
millisecond) or, for a signal, when the launcher noticed the death. A rank that timed out
says which peers did not arrive (the heartbeat's diagnosis, recorded beside its traceback:
``crash_report.py``); such a peer, hung or stopped and then ended by the launcher, is a cause
too: the survivor's timeout is the symptom, and the restart line names the absent rank. With
no cause at all (every rank lost its connection), the first collateral failure is named as such.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from neural_arch.distributed.launcher.frames import parse_frames, place
from neural_arch.distributed.launcher.records import FailureRecord
from neural_arch.distributed.launcher.restart_policy import is_peer_error, peer_marker, recorded_traceback, signature


def exception_line(record: FailureRecord) -> str:
    """The last line of the recorded traceback (``KeyError: 'lr'``), '' without one."""
    lines = [line for line in recorded_traceback(record.message).splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def failure_time(record: FailureRecord) -> float:
    """When the rank failed: the worker's own stamp of its exception, else when the agent noticed."""
    if isinstance(record.message, dict):
        stamp = record.message.get("extraInfo", {}).get("failed_at")
        try:
            return float(stamp)
        except (TypeError, ValueError):
            pass
    return float(record.timestamp)


def is_collateral(record: FailureRecord) -> bool:
    """Whether the failure is an effect of another rank's (see the module docstring)."""
    last = exception_line(record)
    if last:  # it raised (perhaps stopped afterwards, while leaving): judge the exception
        return is_peer_error(last)
    return record.stopped_by_launcher or record.signal == "SIGTERM" or is_peer_error(str(record.message))


DID_NOT_ARRIVE = "; did not arrive: "
"""Where the heartbeat's diagnosis (``runtime/heartbeat.py``) starts naming the absent peers:
``rank 0 timed out in collective #13; did not arrive: rank 1 (silent for 10 s: stopped or dead) on vm``."""


def diagnosis(record: FailureRecord) -> str:
    """The rank's own account of whom it waited for: the diagnosis its worker recorded
    (``extraInfo.diagnosis``), else its exception line when that names them (our collectives'
    ``CollectiveFailed``); '' without one."""
    info = record.message.get("extraInfo", {}) if isinstance(record.message, dict) else {}
    for text in (str(info.get("diagnosis") or ""), exception_line(record)):
        if DID_NOT_ARRIVE in text:
            return text
    return ""


def absent_peers(record: FailureRecord) -> dict[int, str]:
    """Rank -> why, for every peer ``record``'s diagnosis says did not arrive (``{1: "silent for
    10 s: stopped or dead"}``); {} when it names none."""
    text = diagnosis(record)
    if not text:
        return {}
    found = {}
    for item in re.split(r", (?=rank \d+ \()", text.split(DID_NOT_ARRIVE, 1)[1]):
        match = re.match(r"rank (\d+) \(([^()]*)\)", item.strip())
        if match:
            found[int(match[1])] = match[2]
    return found


def causes(records: Sequence[FailureRecord]) -> list[FailureRecord]:
    """``records`` ordered: causes first by time, then collateral failures by time (rank breaks
    ties); a rank the first timeout names as absent counts as a cause. Only the first: a stopped rank
    woken to write its stacks may time out too, naming the survivor that has left meanwhile."""
    named = sorted(
        (r for r in records if is_collateral(r) and absent_peers(r)), key=lambda r: (failure_time(r), r.rank)
    )
    absent = set(absent_peers(named[0])) if named else set()
    return sorted(records, key=lambda r: (is_collateral(r) and r.rank not in absent, failure_time(r), r.rank))


def cause_text(ordered: Sequence[FailureRecord]) -> str:
    """How ``ordered[0]`` (``causes``' first) failed: ``how``, or, for a rank that only failed to
    arrive, ``did not arrive (silent for 10 s: stopped or dead): rank 0 timed out in collective #13
    waiting for it; then killed by signal SIGKILL (stopped by the launcher)``."""
    first = ordered[0]
    if is_collateral(first):
        for other in ordered[1:]:
            why = absent_peers(other).get(first.rank)
            if why is not None:
                waited = diagnosis(other).split(DID_NOT_ARRIVE, 1)[0]
                waited = waited[waited.find("rank ") :] if "rank " in waited else waited  # no exception type
                return f"did not arrive ({why}): {_clip(waited, 160)} waiting for it; then {_own_end(first)}"
    return how(first)


def _own_end(record: FailureRecord) -> str:
    """How a collateral failure ended, briefly: the launcher's signal (a woken rank may raise first,
    into the closed group: that is not news), else its peer error, else its exit code."""
    raised = exception_line(record)
    if record.signal or not raised:
        end = f"killed by signal {record.signal}" if record.signal else f"exited with code {record.exitcode}"
        return end + (" (stopped by the launcher)" if record.stopped_by_launcher else "")
    return f"raised {raised.split(':', 1)[0]}: {peer_marker(raised) or _clip(raised, 80)}"


def alike(records: Sequence[FailureRecord]) -> bool:
    """Whether every one of ``records`` (two or more) raised the same exception at the same place."""
    found = {signature(r) for r in records}
    return len(records) > 1 and len(found) == 1 and None not in found


def where(record: FailureRecord) -> Optional[str]:
    """Where the recorded exception happened, the user's frame first (``frames.place``); None without one."""
    frames = parse_frames(recorded_traceback(record.message))
    return place(frames) if frames else None


def how(record: FailureRecord) -> str:
    """``killed by signal SIGKILL``, ``exited with code 3``, or ``raised KeyError: 'lr' at a.py:6 in f``."""
    if record.signal and not exception_line(record):
        return f"killed by signal {record.signal}"
    last = exception_line(record)
    if last:
        place = where(record)
        return f"raised {_clip(last)} at {place}" if place else f"raised {_clip(last)}"
    return f"exited with code {record.exitcode}"


def _clip(text: str, limit: int = 480) -> str:
    # Long enough for a collective timeout's whole diagnosis (who did not arrive, silent for how
    # long, on which host): the restart line is the only place a restarted rank's error is shown.
    return text if len(text) <= limit else text[: limit - 3] + "..."


def collateral_line(records: Sequence[FailureRecord]) -> str:
    """``rank 0 failed as a consequence (RuntimeError: connection reset by peer)``; '' if none raised."""
    raised = [r for r in records if is_collateral(r) and exception_line(r)]
    if not raised:
        return ""
    ranks = sorted({r.rank for r in raised})
    who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    last = exception_line(raised[0])
    return f"{who} failed as a consequence ({last.split(':', 1)[0]}: {peer_marker(last)})"


def restart_notice(
    records: Sequence[FailureRecord], host: str, saved: Optional[str], next_attempt: int, attempts: int
) -> str:
    """The launcher's one line for a failed attempt it restarts: the root cause (rank, host, pid,
    signal, exit code or exception and where), the others' failures in one clause, the last
    checkpoint the attempt saved (``saved``, if any), and which attempt comes next."""
    ordered = causes(records)
    first = ordered[0]
    parts = [f"rank {first.rank} (host {host}, pid {first.pid}) {cause_text(ordered)}"]
    others = collateral_line(ordered[1:])
    if others:
        parts.append(others)
    if saved:
        parts.append(f"last checkpoint saved: {saved}")
    return f"neural_arch launcher: {'; '.join(parts)}. Restarting the group: attempt {next_attempt} of {attempts}."
