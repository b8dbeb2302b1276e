"""Copy a worker's output to its log file and the console, in a process of its own.

Started by ``worker.py`` as ``python <path of this file> PREFIX LOG_FD SHOW`` with the
worker's output pipe as stdin and the log file already open (and locked by the worker)
as LOG_FD; not meant to be run by hand.

Why a separate process: a worker killed by SIGKILL cannot flush anything, but a pump in
another process still reads every byte the worker wrote before it died. The pump ignores
SIGINT/SIGTERM (a stopping job must not lose its last lines) and exits when the pipe
closes. Its log file descriptor carries the worker's exclusive lock, so the lock lasts
until the pump has written everything.

Why run by path and import only the standard library: a pump starts with every worker
(and every restart), so it must start in milliseconds; ``-m`` or any ``neural_arch``
import would first run the package ``__init__``s, which import torch. Keep it that way.
"""

from __future__ import annotations

import os
import signal
import sys


def pump(prefix: bytes, log_fd: int, show: bool) -> None:
    """Read stdin to EOF; append raw lines to the open file ``log_fd`` (-1: none), prefixed
    lines to stdout."""
    log = os.fdopen(log_fd, "ab", buffering=0) if log_fd >= 0 else None
    pending = b""
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        _emit(lines, prefix, log, show)
        if show and b"\r" in pending:  # a progress bar redrawing its line: show its latest state
            _write(b"\r" + prefix + pending.rsplit(b"\r", 1)[1])
    if pending:
        _emit([pending], prefix, log, show)


LOG_ONLY = b"\x00neural_arch:log-only\x00"
"""A line starting with this goes to the log file only, without it (crash_report.py: a traceback
that is another rank's effect stays off the console; worker.py imports this file by path)."""


def _final(line: bytes) -> bytes:
    # "\r 10%|...\r 20%|..." is one line redrawn in place; only its last state matters.
    return line.rstrip(b"\r").rsplit(b"\r", 1)[-1]


def _emit(lines: list[bytes], prefix: bytes, log: object, show: bool) -> None:
    if log is not None:
        log.write(b"".join(_final(line.replace(LOG_ONLY, b"", 1)) + b"\n" for line in lines))  # type: ignore[attr-defined]
    if show:
        shown = [line for line in lines if not line.startswith(LOG_ONLY)]
        _write(b"".join((b"\r" if b"\r" in line else b"") + prefix + _final(line) + b"\n" for line in shown))


def _write(data: bytes) -> None:
    while data:
        data = data[os.write(1, data) :]


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pump(sys.argv[1].encode(), int(sys.argv[2]), sys.argv[3] == "1")
