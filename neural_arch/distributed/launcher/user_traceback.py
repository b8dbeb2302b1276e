"""A script's traceback without the launcher's frames above the script's own: ``user_traceback(exc)``.

Try it: ``python -m neural_arch.distributed.launcher --nproc_per_node=2 bug.py`` with a
``bug.py`` that raises; each rank's traceback starts at bug.py's frames, as ``python bug.py``
would show it. Used by the worker (``crash_report.py``) for the console, the rank's log and
the error file the failure summary quotes.

Why: a worker runs the script through ``worker.py``, ``program.py`` and ``runpy`` (and a
script decorated with torch's ``@record`` adds torch elastic's wrapper); those frames sit
above the user's in every traceback, say nothing about the bug and push the lines that do
off the screen. Wrapper frames *below* the last user frame stay: there the error happened
inside them (a script calling the launcher's API, say), which the user needs to see. A
traceback without any user frame (the launcher's own failure) stays whole.
"""

from __future__ import annotations

import os
import traceback
from types import FrameType, TracebackType
from typing import Optional

LAUNCHER_DIR = os.path.dirname(os.path.realpath(__file__))
"""Frames of files in this folder are the launcher's (``worker.py`` runs as ``__main__``, so
its module name cannot tell)."""
WRAPPER_MODULES = ("runpy", "torch.distributed.elastic")
"""Modules whose frames wrap a script: runpy runs it, torch elastic's ``@record`` wraps its main."""


def is_wrapper(frame: FrameType) -> bool:
    """Whether ``frame`` belongs to the machinery that runs a script rather than to the script."""
    if os.path.dirname(os.path.realpath(frame.f_code.co_filename)) == LAUNCHER_DIR:
        return True
    name = str(frame.f_globals.get("__name__", ""))
    return any(name == module or name.startswith(module + ".") for module in WRAPPER_MODULES)


def user_frames(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    """``tb`` without the wrapper frames that come before its last user frame."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    wrapper = [is_wrapper(entry.tb_frame) for entry in entries]
    users = [i for i, flag in enumerate(wrapper) if not flag]
    if not users:
        return entries[0] if entries else None
    kept = [entry for i, entry in enumerate(entries) if not wrapper[i] or i > users[-1]]
    stripped: Optional[TracebackType] = None
    for entry in reversed(kept):  # a traceback is a linked list: rebuild it from the innermost frame
        stripped = TracebackType(stripped, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return stripped


def user_traceback(exc: BaseException) -> str:
    """What Python prints for the uncaught ``exc`` (chained exceptions included), minus the
    wrapper frames above the user's code; ends with a newline."""
    return "".join(traceback.format_exception(type(exc), exc, user_frames(exc.__traceback__)))
