"""The format of a rank's log file, ``LOG_DIR/rank_N.log``: written by the worker (and its
log pump), read back by the failure summary; ``LOG_DIR/progress/`` markers, written by
the worker, read by the restart policy; and the attempt ids that name both. Both sides
import this one module.

Use: ``attempt_lines(log_path(log_dir, rank), pid)`` -> that worker's output lines.

Format: the whole output of every attempt of rank N, appended; each attempt begins with
one header line (``ATTEMPT_HEADER``) naming its pid, which is how a reader finds the lines
of the failed process. While a worker runs, its log file descriptor holds an exclusive
``flock``, which the log pump inherits and keeps until it has written the last byte; a
reader that takes a shared lock first therefore sees every line.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Optional

from neural_arch.utils.file_lock import lock_file

ATTEMPT_MARK = "--- neural_arch worker:"
ATTEMPT_HEADER = ATTEMPT_MARK + " rank {rank}, attempt {attempt}, pid {pid} ---"
"""First line of each attempt in rank_N.log."""


def log_path(log_dir: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its output."""
    return Path(log_dir) / f"rank_{rank}.log"


def progress_marker(log_dir: Path, attempt: str) -> Path:
    """The file a worker of attempt ``attempt`` (NEURAL_ARCH_ATTEMPT) creates once it has
    saved a checkpoint: the launcher's restart policy reads it as progress."""
    return Path(log_dir) / "progress" / f"attempt_{attempt}"


def saved_step(marker: Path) -> Optional[str]:
    """``step 100``: the last checkpoint an attempt saved, from its progress marker (which holds
    the checkpoint's name, ``step_00000100``); None when it saved none."""
    try:
        name = marker.read_text().strip()
    except OSError:
        return None
    found = re.fullmatch(r"step_0*(\d+)", name)
    return f"step {found[1]}" if found else (name or "a checkpoint")


def clear_progress_markers(log_dir: Path) -> None:
    """Remove ``LOG_DIR/progress/``: a job's markers matter to that job's restarts only, and
    one file per attempt would otherwise pile up in a reused log directory."""
    shutil.rmtree(Path(log_dir) / "progress", ignore_errors=True)


def attempt_id(count: int, unique: str) -> str:
    """NEURAL_ARCH_ATTEMPT of the group's ``count``-th start (1: the first), made unique by
    ``unique`` (agent.py): workers prefix their store keys with it, and name attempts by it."""
    return f"{count}-{unique}"


def attempt_number(attempt: str) -> int:
    """Which start of the group ``attempt`` (``ClusterEnv.attempt``: an ``attempt_id``, or torch's
    TORCHELASTIC_RESTART_COUNT) is, 0 for the first, as the failure summary counts."""
    count, dash, _ = attempt.partition("-")
    try:
        return int(count) - 1 if dash else int(count)
    except ValueError:  # set by hand to something else: nothing to count
        return 0


def attempt_header(rank: int, attempt: str, pid: int) -> str:
    """The line that starts one attempt's output (without its newline)."""
    return ATTEMPT_HEADER.format(rank=rank, attempt=attempt, pid=pid)


def attempt_lines(log: Path, pid: int, timeout: float = 5.0) -> list[str]:
    """The lines process ``pid`` wrote to ``log`` (its attempt's section), once the log pump
    writing them has finished or ``timeout`` seconds have passed; [] if none."""
    try:
        with open(log, "rb") as f:
            lock_file(f.fileno(), exclusive=False, timeout=timeout)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return _section_for_pid(lines, pid)


def _section_for_pid(lines: list[str], pid: int) -> list[str]:
    start = None
    for i, line in enumerate(lines):
        if line.startswith(ATTEMPT_MARK):
            if start is not None:
                return lines[start:i]
            if re.search(rf"pid {pid} ---$", line):
                start = i + 1
    return lines[start:] if start is not None else []
