"""Append-only JSON-lines files of a run (``metrics.jsonl``, ``logs/samples_rank_N.jsonl``)
that a torn last line cannot break.

Use::

    append_row(run_dir / "metrics.jsonl", {"step": 3, "train/loss": 0.5})  # one whole line, no symlink followed
    rows = read_rows(run_dir / "metrics.jsonl")                            # every parseable row, in order

Why: a kill or a full disk can cut the last line short. ``append_row`` first ends an
unterminated last line (so the new row starts a line of its own instead of being glued to
the torn one) and writes the row with a single ``write`` to an ``O_APPEND`` descriptor;
``read_rows`` skips a line that does not parse as a JSON object, so one torn line never
makes a later run fail. Opened with ``O_NOFOLLOW``: a symlink planted in the run directory
does not get appended to.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from neural_arch.utils.safe_files import open_no_follow


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Add ``row`` as one JSON line at the end of ``path`` (created 0644 if missing)."""
    line = (json.dumps(row) + "\n").encode()
    fd = open_no_follow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn last line: end it, it is skipped on reading
            line = b"\n" + line
        os.write(fd, line)
    finally:
        os.close(fd)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every line of ``path`` that is a JSON object, in order; torn or garbled lines are skipped."""
    rows = []
    with open(open_no_follow(path, os.O_RDONLY), "rb") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:  # a line cut short by a kill or a full disk
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows
