"""What a worker prints and records when its script raises: ``report_failure(exc, shown)``.

Called by ``worker.py`` for an uncaught exception of the script; not run by hand. Try it:
``python -m neural_arch.distributed.launcher --nproc_per_node=2 bug.py`` with a ``bug.py``
that raises.

1. The traceback, without the launcher's frames (``user_traceback.py``), goes to stderr
   (the rank's log and, prefixed ``[rank N]``, the console). On a restart, a traceback the
   console already showed is one line naming where (``repeats.py``). The traceback of an
   error caused by another rank (a peer's closed connection, a collective timeout:
   ``restart_policy.PEER_ERRORS``) goes to the rank's log only: the launcher's line names
   the rank that failed first, and this one in a clause (``blame.py``).
2. A collective timeout adds a one-line diagnosis: which rank did not arrive
   (``runtime/heartbeat.py``).
3. The same traceback is written to torch elastic's error file, which the launcher's restart
   policy and failure summary read.
4. The process group is left at once, without waiting for peers that may be healthy and busy.

A script that installed its own ``sys.excepthook`` has it called instead of step 1, as
``python script.py`` would (with the same traceback, less the launcher's frames; through
torch's ``[rankN]:`` wrapper when torch put one around it); steps 2-4 still happen.
``sys.last_exc`` and friends are set first, as Python sets them, so the script's own
``atexit`` handlers can tell it is dying of an exception.

Loaded only once the script has failed, and without torch when the script did not import it:
the runtime's diagnosis and teardown are asked for only when the script loaded them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional

from neural_arch.distributed.launcher.logpump import LOG_ONLY
from neural_arch.distributed.launcher.repeats import ShownTracebacks
from neural_arch.distributed.launcher.restart_policy import is_peer_error
from neural_arch.distributed.launcher.user_traceback import user_frames, user_traceback

RUNTIME = "neural_arch.distributed.runtime"


def report_failure(exc: BaseException, shown: Optional[ShownTracebacks]) -> None:
    """Print and record ``exc``; ``shown``: the console's tracebacks, when this rank's output
    is on the console (None: always print the whole traceback)."""
    text = user_traceback(exc)
    _set_last_exception(exc)
    earlier = shown.repeat_of(text) if shown is not None else None
    if scripts_own_hook():  # the script's own hook prints it, as under python
        _call_excepthook(exc)
    elif is_peer_error(f"{type(exc).__name__}: {exc}"):  # another rank's failure: its log only
        sys.stderr.write("".join(LOG_ONLY.decode() + line for line in text.splitlines(keepends=True)))
        sys.stderr.flush()
    elif earlier is None:
        sys.stderr.write(text)
        sys.stderr.flush()
        if shown is not None:
            shown.add(text)
    else:
        assert shown is not None  # repeat_of answered
        print(
            f"neural_arch: attempt {shown.attempt} failed with the same traceback as rank {earlier[0]} "
            f"attempt {earlier[1]} (shown above)",
            file=sys.stderr,
            flush=True,
        )
    hint = _stragglers(exc)
    if hint:
        print(f"neural_arch: {hint}", file=sys.stderr, flush=True)
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        write_error_file(exc, text, os.environ["TORCHELASTIC_ERROR_FILE"], hint)
    if "torch.distributed" in sys.modules:  # else the script cannot have joined a process group
        from neural_arch.distributed.runtime.process_group import abandon_process_group

        abandon_process_group()


def scripts_own_hook() -> bool:
    """Whether ``sys.excepthook`` is a hook of the script's (or of a library it chose), not Python's
    own. torch's ``init_process_group`` wraps whatever hook there was to prefix its lines with
    ``[rankN]: ``; wrapped around Python's own, what we print says more (without the launcher's
    frames, a peer's effect in the log only), so it does not count."""
    hook = sys.excepthook
    while getattr(hook, "__name__", "") == "_distributed_excepthook":
        cells = dict(zip(hook.__code__.co_freevars, getattr(hook, "__closure__", None) or ()))
        if "old_hook" not in cells:
            break
        hook = cells["old_hook"].cell_contents
    return hook is not sys.__excepthook__


def _set_last_exception(exc: BaseException) -> None:
    """What Python sets for an uncaught exception before its hook runs."""
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
    if sys.version_info >= (3, 12):
        sys.last_exc = exc


def _call_excepthook(exc: BaseException) -> None:
    try:
        sys.excepthook(type(exc), exc, user_frames(exc.__traceback__))
    except BaseException as failed:  # noqa: BLE001 - Python reports a failing hook, then the error
        print("Error in sys.excepthook:", file=sys.stderr)
        sys.__excepthook__(type(failed), failed, failed.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        sys.__excepthook__(type(exc), exc, user_frames(exc.__traceback__))
    sys.stderr.flush()


def _stragglers(exc: BaseException) -> Optional[str]:
    """A collective timeout's one-line diagnosis (which rank did not arrive), or None; asked only
    of a runtime the script loaded (our collectives' own ``CollectiveFailed`` names the ranks itself)."""
    if not _is_timeout(exc) or f"{RUNTIME}.heartbeat" not in sys.modules:
        return None
    calls = sys.modules.get(f"{RUNTIME}.calls")
    if calls is not None and isinstance(exc, calls.CollectiveFailed):
        return None
    return sys.modules[f"{RUNTIME}.heartbeat"].describe_stragglers()


def _is_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text


def write_error_file(exc: BaseException, text: str, path: str, diagnosis: Optional[str] = None) -> None:
    """Record ``exc`` with its traceback ``text`` in torch elastic's error-file format (what its
    ``ErrorHandler.record_exception`` writes) with a timeout's ``diagnosis`` (who did not
    arrive, which the launcher then names as the cause: ``blame.py``), whole or not at all: the
    launcher SIGTERMs the other ranks when one fails, and a file cut off mid-write would make
    torch's agent crash on it (JSONDecodeError) instead of restarting the job."""
    # failed_at: to the millisecond, for the summary's "first to fail" (torch reads timestamp as an int)
    info = {"py_callstack": text, "timestamp": str(int(time.time())), "failed_at": f"{time.time():.3f}"}
    if diagnosis:
        info["diagnosis"] = diagnosis
    data = {"message": {"message": f"{type(exc).__name__}: {exc}", "extraInfo": info}}
    partial = path + ".partial"
    with open(partial, "w") as f:
        json.dump(data, f)
    os.replace(partial, path)
