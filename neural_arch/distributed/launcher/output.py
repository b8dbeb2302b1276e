"""Where each worker's stdout and stderr go: the launcher's plan, and the worker's pipes to its log pump.

Launcher side (``launch.py``)::

    spec = OutputSpec.plan(nproc=2, redirects="0", tee="3", prefix="rank", role="default")
    env[OUTPUT_VARIABLE] = spec.to_text()            # the workers' NEURAL_ARCH_OUTPUT

Worker side (``worker.py``, before it runs the script)::

    tee = start_output(*output_settings(), rank, local_rank, log, show)   # env/worker_output.py
    ...
    tee.close()

As torchrun (torch 2.13): a worker's stdout goes to the launcher's stdout and its stderr to
the launcher's stderr. ``--redirects`` sends a stream to its file only, ``--tee`` to its file
and the console; the files are torchrun's ``<log_dir>/<run_id>_<random>/attempt_<k>/
<local_rank>/stdout.log`` and ``stderr.log`` (the folder torch elastic gives the rank, that of
its ``error.json``). ``--local-ranks-filter`` and ``--rank0-only`` hide ranks from the console.
Ours besides: every line of both streams also goes to ``rank_N.log`` (the failure summary reads
it), and the console lines are prefixed ``[rank N] `` (``--output-prefix rank``, the default);
``--output-prefix torchrun`` prefixes only a ``--tee``'d stream's lines, with
``[<role><local_rank>]:`` or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, as torchrun does.

This module imports only the standard library and this package's file helpers, so a worker
can load it before the script without torch.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from string import Template
from typing import Optional

from neural_arch.utils.file_lock import lock_file
from neural_arch.utils.safe_files import open_no_follow

LOGPUMP = str(Path(__file__).with_name("logpump.py"))
"""Run by path, not ``-m``: importing it as a module would first import neural_arch's
package ``__init__``s (and torch), seconds instead of milliseconds per worker start."""

OUT, ERR = 1, 2
"""torch elastic's ``Std`` bits: 1 stdout, 2 stderr, 3 both."""

PREFIXES = ("rank", "torchrun")
RANK_PREFIX = "[rank ${rank}] "
TORCHRUN_PREFIX = "[${role_name}${local_rank}]:"
"""torchrun's prefix of a --tee'd line (torch elastic's local_elastic_agent.py)."""


@dataclass
class OutputSpec:
    """The launcher's plan for every local rank's two streams (masks of ``OUT`` | ``ERR``)."""

    console: list[int] = field(default_factory=list)
    """Streams shown on the console (not redirected, or tee'd), by local rank."""
    files: list[int] = field(default_factory=list)
    """Streams written to ``stdout.log`` / ``stderr.log``, by local rank."""
    prefixed: list[int] = field(default_factory=list)
    """Streams whose console lines get ``template``, by local rank."""
    template: str = RANK_PREFIX
    """``${rank}``, ``${local_rank}``, ``${role_name}`` are substituted, as in torchrun's template."""
    role: str = "default"

    @classmethod
    def plan(
        cls,
        nproc: int,
        redirects: dict[int, int],
        tee: dict[int, int],
        prefix: str,
        role: str,
        template: Optional[str] = None,
    ) -> OutputSpec:
        """From torchrun's ``--redirects``/``--tee`` (as masks by local rank, ``torchrun_compat.stream_masks``)
        and ``--output-prefix``: ``rank`` (every console line) or ``torchrun`` (a tee'd stream's lines,
        with ``template``, torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, when given)."""
        if prefix not in PREFIXES:
            raise ValueError(f"output_prefix={prefix!r} must be one of {', '.join(PREFIXES)}.")
        ranks = range(nproc)
        console = [(OUT | ERR) & ~(redirects.get(r, 0) & ~tee.get(r, 0)) for r in ranks]
        files = [redirects.get(r, 0) | tee.get(r, 0) for r in ranks]
        if prefix == "rank":
            return cls(console, files, [OUT | ERR] * nproc, RANK_PREFIX, role)
        return cls(console, files, [tee.get(r, 0) for r in ranks], template or TORCHRUN_PREFIX, role)

    def to_text(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_text(cls, text: Optional[str]) -> OutputSpec:
        """The plan the launcher wrote; without one (a worker started by hand), every line on the console."""
        return cls(**json.loads(text)) if text else cls()

    def of(self, local_rank: int) -> tuple[int, int, int]:
        """(console, files, prefixed) masks of ``local_rank`` (both streams shown, no files when unplanned)."""

        def mask(masks: list[int], default: int) -> int:
            return masks[local_rank] if local_rank < len(masks) else default

        return mask(self.console, OUT | ERR), mask(self.files, 0), mask(self.prefixed, OUT | ERR)

    def prefix(self, rank: int, local_rank: int) -> str:
        return Template(self.template).safe_substitute(role_name=self.role, rank=rank, local_rank=local_rank)


class OutputTee:
    """Route fds 1 and 2 through a pipe each to a pump process (logpump.py) that writes the log
    files and the console lines, and survives this process being killed."""

    def __init__(
        self,
        log_path: Optional[Path],
        console: tuple[bool, bool],
        prefixes: tuple[str, str],
        files: tuple[Optional[Path], Optional[Path]] = (None, None),
    ) -> None:
        """``console``/``prefixes``/``files``: (stdout's, stderr's) console visibility, console
        prefix, and own file (None: none)."""
        keep: list[int] = []  # descriptors the pump inherits, closed here once it has them
        log_fd = -1
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_fd = open_no_follow(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            # A previous attempt's pump may still hold the lock briefly; after 10 s write
            # unlocked rather than not at all.
            lock_file(log_fd, exclusive=True, timeout=10.0)
            keep.append(log_fd)
        command = [sys.executable, LOGPUMP, "--log-fd", str(log_fd)]
        writers = []
        for number, (shown, prefix, path) in enumerate(zip(console, prefixes, files), start=1):
            read_fd, write_fd = os.pipe()
            file_fd = -1
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                file_fd = open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                keep.append(file_fd)
            keep.append(read_fd)
            writers.append(write_fd)
            command += ["--stream", str(read_fd), str(number if shown else -1), str(file_fd), prefix]
        self.pump = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            close_fds=True,
            pass_fds=tuple(keep),
            # Its own session: the launcher SIGKILLs a stopped worker's whole process group,
            # and the pump must outlive that long enough to write the worker's last lines.
            start_new_session=True,
        )
        # The pump shares the log file and so its lock, which is released only when the pump
        # exits too: a reader that waits for the lock sees every line (log_format.py).
        for fd in keep:
            os.close(fd)
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(writers[0], 1)
        os.dup2(writers[1], 2)
        for fd in writers:
            os.close(fd)
        _rebind_python_streams()

    def close(self) -> None:
        """Restore the original fds; the pump drains what is left and exits."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        _rebind_python_streams()
        try:
            self.pump.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a child of the script still holds a pipe
            pass


def _rebind_python_streams() -> None:
    # Line-buffered text streams on fds 1/2, so lines arrive whole and in order.
    sys.stdout = io.TextIOWrapper(
        os.fdopen(1, "wb", buffering=0, closefd=False), line_buffering=True, write_through=True
    )
    sys.stderr = io.TextIOWrapper(
        os.fdopen(2, "wb", buffering=0, closefd=False), line_buffering=True, write_through=True
    )


def start_output(
    spec_text: Optional[str], folder: Optional[str], rank: int, local_rank: int, log: Optional[Path], show: bool
) -> OutputTee:
    """Start this worker's log pump as the launcher planned (``spec_text``: NEURAL_ARCH_OUTPUT,
    ``folder``: the rank's torch elastic folder, both from ``env.worker_output.output_settings()``);
    ``show``: whether this rank is on the console at all (``--rank0-only``, ``--local-ranks-filter``)."""
    spec = OutputSpec.from_text(spec_text)
    console, files, prefixed = spec.of(local_rank)
    prefix = spec.prefix(rank, local_rank)
    where = Path(folder) if folder else None
    return OutputTee(
        log,
        (show and bool(console & OUT), show and bool(console & ERR)),
        (prefix if prefixed & OUT else "", prefix if prefixed & ERR else ""),
        (
            where / "stdout.log" if where is not None and files & OUT else None,
            where / "stderr.log" if where is not None and files & ERR else None,
        ),
    )
