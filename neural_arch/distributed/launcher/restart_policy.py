"""When restarting a failed group cannot help: the same rank failing the same way twice.

Used by the agent (``agent.py``) after every failed attempt::

    reason = repeated_failure(failure_history, attempt, progressed=False)
    # None: restart as usual; else one line saying why restarting again is pointless

The rule. Restarts are for failures a restart can fix: a signal (killed, OOM-killed,
preempted), a lost peer or a hang (the rank dies of a timeout or a broken connection,
the effect of another rank's trouble), an exit without a traceback, anything after the
run made progress. They cannot fix a deterministic bug, which fails at the same place on
every attempt (torchrun's default is 0 restarts for this reason; ours keeps restarts on
and stops this case instead). So the launcher stops at once when a rank fails with a
Python exception whose *signature* (exception type, and the file, line and function of
every frame) equals that rank's failure in the previous attempt, and the later attempt
saved no new checkpoint.

Why this proxy: the launcher cannot see training steps. A checkpoint is the progress it
can see: ``save_checkpoint``/``save_sharded`` tell the worker wrapper, which leaves a
marker (``log_format.progress_marker``). A script that saves no checkpoints through
neural_arch is judged by the traceback alone: an identical failure twice in a row stops.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Optional, Sequence

from neural_arch.distributed.launcher.records import FailureRecord

PEER_ERRORS = (
    "connection reset by peer",
    "connection closed by peer",
    "connectfullmesh",
    "timed out",
    "timeout",
    "broken pipe",
    "connection refused",
    "did not arrive",
)
"""Text of errors a rank raises because a PEER died or stalled: effects, not causes."""

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


@dataclass(frozen=True)
class Signature:
    """Where and how a rank's Python exception happened, without its (variable) message."""

    exception: str
    """The exception's type, e.g. ``RuntimeError``."""
    frames: tuple[tuple[str, int, str], ...]
    """(file, line, function) of every frame, outermost first (chained exceptions included)."""

    def where(self) -> str:
        """``train.py:12 in step``: the innermost frame."""
        file, line, func = self.frames[-1] if self.frames else ("?", 0, "?")
        return f"{file.rsplit('/', 1)[-1]}:{line} in {func}"


def recorded_traceback(message: object) -> str:
    """The Python traceback a worker recorded in its elastic error file ('' if none)."""
    if isinstance(message, dict):
        return str(message.get("extraInfo", {}).get("py_callstack", ""))
    return ""


def is_peer_error(text: str) -> bool:
    """Whether ``text`` reads like the effect of another rank's failure."""
    lowered = text.lower()
    return any(marker in lowered for marker in PEER_ERRORS)


def signature(record: FailureRecord) -> Optional[Signature]:
    """The failure's signature, or None when a restart might help (no Python traceback: a
    signal or a plain exit; or an error caused by a peer). A rank the launcher stopped
    with SIGTERM after it had already raised still counts: its error file was written."""
    stack = recorded_traceback(record.message)
    lines = [line for line in stack.splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    if is_peer_error(last):
        return None
    frames = tuple((m["file"], int(m["line"]), m["func"]) for m in map(_FRAME.match, lines) if m)
    return Signature(exception=last.split(":", 1)[0].strip(), frames=frames)


def repeated_failure(history: Sequence[FailureRecord], attempt: int, progressed: bool) -> Optional[str]:
    """Why restarting after ``attempt`` cannot help, or None (see the module docstring)."""
    if attempt == 0 or progressed:
        return None
    now = {r.rank: signature(r) for r in history if r.attempt == attempt}
    before = {r.rank: signature(r) for r in history if r.attempt == attempt - 1}
    same = sorted(rank for rank, sig in now.items() if sig is not None and before.get(rank) == sig)
    if not same:
        return None
    sig = now[same[0]]
    assert sig is not None  # filtered above
    who = f"rank {same[0]}" if len(same) == 1 else "ranks " + ", ".join(map(str, same))
    return (
        f"{who} failed with the same {sig.exception} at {sig.where()} on attempts {attempt - 1} and {attempt} "
        "without saving a new checkpoint, so another restart would fail the same way; fix it and run again"
    )


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
"""Signals after which a worker may stop on purpose: neural-arch's trainer saves, then exits 128 + the signal."""


def stopped_on_request(history: Sequence[FailureRecord], attempt: int) -> Optional[int]:
    """The signal a worker of ``attempt`` stopped on purpose for (it *exited* 128 + a stop signal,
    which a process killed by that signal does not), or None. Such a stop is what the user or
    the scheduler asked for: restarting would undo it."""
    for record in history:
        if record.attempt == attempt and record.signal is None and record.exitcode - 128 in STOP_SIGNALS:
            return record.exitcode - 128
    return None


USAGE_ERROR = 2
"""The exit code of a usage or configuration error (argparse's, and neural-arch's one-line errors)."""


def usage_error(history: Sequence[FailureRecord], attempt: int) -> Optional[str]:
    """Why a restart after ``attempt`` cannot help when a rank exited with code 2, or None."""
    for record in history:
        if record.attempt == attempt and record.signal is None and record.exitcode == USAGE_ERROR:
            return (
                f"rank {record.rank} exited with code {USAGE_ERROR}, a usage or configuration error (its "
                "message is below); a restart would give the same answer"
            )
    return None
