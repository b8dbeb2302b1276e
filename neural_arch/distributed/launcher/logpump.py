"""Copy a worker's stdout and stderr to the console and its log files, in a process of its own.

Started by the worker (``output.OutputTee``) as ``python <path of this file> --log-fd FD
--stream IN_FD CONSOLE_FD FILE_FD PREFIX ...`` (one ``--stream`` for stdout, one for stderr),
with the read ends of the worker's output pipes and its open files as inherited descriptors;
not meant to be run by hand. ``python logpump.py PREFIX LOG_FD SHOW`` (the older form) pumps
stdin alone to stdout.

Each stream's lines go, unchanged, to the rank's log (``rank_N.log``, both streams) and, when
the stream has one, to its own file (torchrun's ``stdout.log`` / ``stderr.log``), and, when
shown, with the stream's prefix to the console stream it came from (stdout to the
launcher's stdout, stderr to its stderr, as under torchrun). The two streams are read as
they arrive; a stdout line and a stderr line written within the same instant may reach
``rank_N.log`` in either order.

Why a separate process: a worker killed by SIGKILL cannot flush anything, but a pump in
another process still reads every byte the worker wrote before it died. The pump ignores
SIGINT/SIGTERM (a stopping job must not lose its last lines) and exits when both pipes
close. Its log file descriptor carries the worker's exclusive lock, so the lock lasts
until the pump has written everything.

Why run by path and import only the standard library: a pump starts with every worker
(and every restart), so it must start in milliseconds; ``-m`` or any ``neural_arch``
import would first run the package ``__init__``s, which import torch. Keep it that way.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from typing import BinaryIO, Optional

LOG_ONLY = b"\x00neural_arch:log-only\x00"
"""A line starting with this goes to the log files only, without it (crash_report.py: a traceback
that is another rank's effect stays off the console; worker.py imports this file by path)."""


class Stream:
    """One of the worker's output streams: where its lines go."""

    def __init__(self, source: int, console: int, file: int, prefix: bytes) -> None:
        self.source = source
        """The read end of the worker's pipe."""
        self.console = console
        """1 or 2: the console stream its lines are shown on; -1: not shown."""
        self.file: Optional[BinaryIO] = os.fdopen(file, "ab", buffering=0) if file >= 0 else None
        """Its own log file (torchrun's stdout.log / stderr.log), if it has one."""
        self.prefix = prefix
        self.pending = b""

    def feed(self, chunk: bytes, log: Optional[BinaryIO]) -> None:
        """Pass on every whole line of what has arrived; keep a partial last line for later."""
        lines = (self.pending + chunk).split(b"\n")
        self.pending = lines.pop()
        self.emit(lines, log)
        if self.console >= 0 and b"\r" in self.pending:  # a progress bar redrawing its line: its latest state
            _write(self.console, b"\r" + self.prefix + self.pending.rsplit(b"\r", 1)[1])

    def finish(self, log: Optional[BinaryIO]) -> None:
        """The worker closed the stream: pass on its unterminated last line."""
        if self.pending:
            self.emit([self.pending], log)
            self.pending = b""
        if self.file is not None:
            self.file.close()

    def emit(self, lines: list[bytes], log: Optional[BinaryIO]) -> None:
        kept = b"".join(_final(line.replace(LOG_ONLY, b"", 1)) + b"\n" for line in lines)
        for out in (log, self.file):
            if out is not None:
                out.write(kept)
        if self.console >= 0:
            shown = [line for line in lines if not line.startswith(LOG_ONLY)]
            _write(
                self.console,
                b"".join((b"\r" if b"\r" in line else b"") + self.prefix + _final(line) + b"\n" for line in shown),
            )


def pump_streams(streams: list[Stream], log_fd: int) -> None:
    """Read every stream to its end, passing lines on as they arrive; ``log_fd``: rank_N.log (-1: none)."""
    log = os.fdopen(log_fd, "ab", buffering=0) if log_fd >= 0 else None
    poller = select.poll()
    by_fd: dict[int, Stream] = {}
    for stream in streams:
        poller.register(stream.source, select.POLLIN | select.POLLHUP | select.POLLERR)
        by_fd[stream.source] = stream
    while by_fd:
        for fd, _ in poller.poll():
            ready = by_fd.get(fd)
            if ready is None:
                continue
            chunk = os.read(fd, 65536)
            if chunk:
                ready.feed(chunk, log)
                continue
            ready.finish(log)
            poller.unregister(fd)
            del by_fd[fd]
    if log is not None:
        log.close()


def pump(prefix: bytes, log_fd: int, show: bool) -> None:
    """Read stdin to EOF; append raw lines to the open file ``log_fd`` (-1: none), prefixed
    lines to stdout (the older, one-stream form)."""
    pump_streams([Stream(0, 1 if show else -1, -1, prefix)], log_fd)


def _final(line: bytes) -> bytes:
    # "\r 10%|...\r 20%|..." is one line redrawn in place; only its last state matters.
    return line.rstrip(b"\r").rsplit(b"\r", 1)[-1]


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _parse(argv: list[str]) -> tuple[list[Stream], int]:
    """``--log-fd FD --stream IN CONSOLE FILE PREFIX [--stream ...]`` -> the streams and the log fd."""
    streams, log_fd, i = [], -1, 0
    while i < len(argv):
        if argv[i] == "--log-fd":
            log_fd, i = int(argv[i + 1]), i + 2
        elif argv[i] == "--stream":
            source, console, file = (int(x) for x in argv[i + 1 : i + 4])
            streams.append(Stream(source, console, file, argv[i + 4].encode()))
            i += 5
        else:
            raise SystemExit(f"logpump: unexpected argument {argv[i]!r}")
    return streams, log_fd


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.argv[1:2] and sys.argv[1].startswith("--"):
        pump_streams(*_parse(sys.argv[1:]))
    else:
        pump(sys.argv[1].encode(), int(sys.argv[2]), sys.argv[3] == "1")
