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
from neural_arch.distributed.launcher.user_traceback import user_traceback
from neural_arch.distributed.runtime.calls import CollectiveFailed
from neural_arch.distributed.runtime.heartbeat import describe_stragglers
from neural_arch.distributed.runtime.process_group import abandon_process_group


def report_failure(exc: BaseException, shown: Optional[ShownTracebacks]) -> None:
    """Print and record ``exc``; ``shown``: the console's tracebacks, when this rank's output
    is on the console (None: always print the whole traceback)."""
    text = user_traceback(exc)
    earlier = shown.repeat_of(text) if shown is not None else None
    if is_peer_error(f"{type(exc).__name__}: {exc}"):  # another rank's failure: its log only
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
    if _is_timeout(exc) and not isinstance(exc, CollectiveFailed):  # CollectiveFailed names the ranks itself
        hint = describe_stragglers()
        if hint:
            print(f"neural_arch: {hint}", file=sys.stderr, flush=True)
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        write_error_file(exc, text, os.environ["TORCHELASTIC_ERROR_FILE"])
    abandon_process_group()


def _is_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text


def write_error_file(exc: BaseException, text: str, path: str) -> None:
    """Record ``exc`` with its traceback ``text`` in torch elastic's error-file format (what its
    ``ErrorHandler.record_exception`` writes), whole or not at all: the launcher SIGTERMs the
    other ranks when one fails, and a file cut off mid-write would make torch's agent crash
    on it (JSONDecodeError) instead of restarting the job."""
    data = {
        "message": {
            "message": f"{type(exc).__name__}: {exc}",
            # failed_at: to the millisecond, for the summary's "first to fail" (torch reads timestamp as an int)
            "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time())), "failed_at": f"{time.time():.3f}"},
        }
    }
    partial = path + ".partial"
    with open(partial, "w") as f:
        json.dump(data, f)
    os.replace(partial, path)
