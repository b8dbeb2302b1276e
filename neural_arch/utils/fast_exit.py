"""Leave a worker process without the interpreter's teardown: ``exit_now(code)``.

Used as a program's last line, never where a caller could go on running Python (tests call
the CLI's ``main`` in-process)::

    exit_now(main())                 # neural_arch.cli.run: the neural-arch command

and, for a script under our launcher, on the script's request only (our trainer asks; a user's
script never does unless it calls ``request_fast_exit``, so its teardown is as under torchrun)::

    request_fast_exit()              # the script, once done (neural_arch/cli/train.py)
    exit_when_asked(main())          # the launcher's worker wrapper, after its own cleanup

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

_asked = False


def request_fast_exit() -> None:
    """Ask the process's top level (``exit_when_asked``) to skip the interpreter's teardown."""
    global _asked
    _asked = True


def exit_when_asked(code: Optional[int]) -> NoReturn:
    """``exit_now(code)`` if the script asked for it (``request_fast_exit``), else ``sys.exit(code)``."""
    if _asked:
        exit_now(code)
    sys.exit(code)


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
