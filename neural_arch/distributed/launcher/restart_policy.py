"""When restarting a failed group cannot help: one rank failing the same way twice, or every rank alike.

Used by the agent (``agent.py``) after every failed attempt::

    reason = repeated_failure(failure_history, attempt, progressed=False)
    # None: restart as usual; else one line saying why restarting again is pointless
    reason = failed_alike(failure_history, attempt, world=2, progressed=False)  # the first attempt

The rule. Restarts are for failures a restart can fix: a signal (killed, OOM-killed,
preempted), a lost peer or a hang (the rank dies of a timeout or a broken connection,
the effect of another rank's trouble), an exit without a traceback, anything after the
run made progress. They cannot fix a deterministic bug, which fails at the same place on
every attempt (torchrun's default is 0 restarts for this reason; ours keeps restarts on
and stops this case instead). So the launcher stops at once when a rank fails with a
Python exception whose *signature* (exception type, and the file, line and function of
every frame) equals that rank's failure in the previous attempt, and the later attempt
saved no new checkpoint; and, on the FIRST attempt, when every rank of a job of two or more
raised the same exception at the same place (``failed_alike``: independent processes
agreeing is the evidence; errors of the outside world, ``OUTSIDE_ERRORS``, are retried).

Why this proxy: the launcher cannot see training steps. A checkpoint is the progress it
can see: ``save_checkpoint``/``save_sharded`` tell the launcher through its channel
(``channel.PROGRESS``). A script that saves no checkpoints through
neural_arch is judged by the traceback alone: an identical failure twice in a row stops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from neural_arch.distributed.launcher.frames import parse_frames, place
from neural_arch.distributed.launcher.records import FailureRecord

PEER_ERRORS = (
    "connection reset by peer",
    "connection closed by peer",
    "peer closed",
    "closed by remote peer",
    "connectfullmesh",
    "timed out",
    "timeout",
    "broken pipe",
    "connection refused",
    "did not arrive",
    "nccl communicator was aborted",
    "remote process exited",
    "failed to recv, got 0 bytes",
)
"""Text of errors a rank raises because a PEER died or stalled (gloo, NCCL, the store, our
collectives' own timeout): effects, not causes."""


@dataclass(frozen=True)
class Signature:
    """Where and how a rank's Python exception happened, without its (variable) message."""

    exception: str
    """The exception's type, e.g. ``RuntimeError``."""
    frames: tuple[tuple[str, int, str], ...]
    """(file, line, function) of every frame, outermost first (chained exceptions included)."""

    def where(self) -> str:
        """``train.py:12 in step``: the user's innermost frame, and the library's beside it (frames.py)."""
        return place(self.frames)


def step_of(checkpoint: Optional[str]) -> Optional[str]:
    """``step 100`` for the checkpoint a worker said it saved (``step_00000100``: ``channel.PROGRESS``),
    its name for another name, None for none (the restart line quotes it)."""
    if checkpoint is None:
        return None
    found = re.fullmatch(r"step_0*(\d+)", checkpoint)
    return f"step {found[1]}" if found else (checkpoint or "a checkpoint")


def recorded_traceback(message: object) -> str:
    """The Python traceback a worker recorded in its elastic error file ('' if none)."""
    if isinstance(message, dict):
        return str(message.get("extraInfo", {}).get("py_callstack", ""))
    return ""


def is_peer_error(text: str) -> bool:
    """Whether ``text`` reads like the effect of another rank's failure."""
    return peer_marker(text) is not None


def peer_marker(text: str) -> Optional[str]:
    """The ``PEER_ERRORS`` entry ``text`` contains (``connection reset by peer``), or None."""
    lowered = text.lower()
    return next((marker for marker in PEER_ERRORS if marker in lowered), None)


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
    return Signature(exception=last.split(":", 1)[0].strip(), frames=tuple(parse_frames(stack)))


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


OUTSIDE_ERRORS = frozenset(
    (
        "OSError",
        "IOError",
        "ConnectionError",
        "ConnectionResetError",
        "ConnectionRefusedError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "TimeoutError",
        "InterruptedError",
        "BlockingIOError",
    )
)
"""Exceptions from the world outside the program (a file system, a network) that may recover:
retried even when every rank raised them alike."""


def failed_alike(history: Sequence[FailureRecord], attempt: int, world: int, progressed: bool) -> Optional[str]:
    """Why restarting after the FIRST attempt cannot help, or None. The rule: when every one of
    the job's ``world`` ranks (two or more) raised the same exception at the same place (type
    and every frame; not a peer's effect, not an ``OUTSIDE_ERRORS`` one) and the attempt saved
    no checkpoint, independent processes agreeing is the evidence of a deterministic bug, and
    the job stops without a restart. One process failing once is retried (then
    ``repeated_failure`` stops a second identical failure)."""
    if attempt != 0 or progressed or world < 2:
        return None
    found = {r.rank: signature(r) for r in history if r.attempt == attempt}
    sigs = set(found.values())
    if len(found) < world or len(sigs) != 1:
        return None
    sig = sigs.pop()
    if sig is None or sig.exception.rsplit(".", 1)[-1] in OUTSIDE_ERRORS:
        return None
    return (
        f"all {world} ranks failed with the same {sig.exception} at {sig.where()} on the first attempt, "
        "so a restart would fail the same way; fix it and run again"
    )


def stopped_on_request(history: Sequence[FailureRecord], attempt: int) -> Optional[int]:
    """The signal a worker of ``attempt`` stopped on purpose for, or None. A worker stopped on
    purpose when it *said* so (neural-arch's trainer does, once it has saved after SIGINT, SIGTERM
    or SIGUSR1: ``channel.STOP``), not when it merely exited 128 + a signal: a script's exit codes
    are its own, as under torchrun, and such an exit is restarted like any failure. A stop is what
    the user or the scheduler asked for: restarting would undo it."""
    for record in history:
        if record.attempt == attempt and record.stop_signal is not None and not record.stopped_by_launcher:
            return record.stop_signal
    return None


USAGE_ERROR = 2
"""The exit code of a usage or configuration error (argparse's, and neural-arch's one-line errors)."""


def usage_error(history: Sequence[FailureRecord], attempt: int) -> Optional[str]:
    """Why a restart after ``attempt`` cannot help when a rank exited with code 2 *saying* it was a
    usage error (neural-arch's commands do: ``channel.USAGE``), or None. A script's own exit 2 is
    restarted, as under torchrun."""
    for record in history:
        if record.attempt == attempt and is_usage_error(record):
            return (
                f"rank {record.rank} exited with code {USAGE_ERROR}, a usage or configuration error (its "
                "message is below); a restart would give the same answer"
            )
    return None


def is_usage_error(record: FailureRecord) -> bool:
    """Whether ``record`` is an exit 2 its worker said was a usage error."""
    return record.signal is None and record.exitcode == USAGE_ERROR and record.usage_error is not None
