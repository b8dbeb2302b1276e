"""Leave a worker process without the interpreter's teardown: ``exit_now(code)``.

Used by ``neural_arch/cli/train.py`` as a launched worker's last line (never where a caller
could go on running Python: tests call the CLI's ``main`` in-process)::

    exit_now(worker_main())

Why: after a run, tearing down an interpreter that has torch, its compiler and gloo loaded
takes 1-4 s on a busy 2-core machine (module dictionaries, C++ destructors), for nothing the
run needs; the launcher and the other ranks wait for it. What a normal exit does that matters
is done here, in the same order: wait for the non-daemon threads, run the ``atexit`` handlers
(our process-group teardown, logging's flush, DataLoader workers' reaping, trackers), flush the
standard streams; then ``os._exit``.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn, Optional


def exit_now(code: Optional[int]) -> NoReturn:
    """Exit with ``code`` (None: 0) as ``sys.exit`` would, less the interpreter's teardown."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more can reach it
            pass
    os._exit(code or 0)
