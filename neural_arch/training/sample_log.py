"""The sample-id audit log (``logging.record_samples``): logs/samples_rank_N.jsonl, one row per step.

Written by the trainer; tests read it to show that resumes, resizes and membership changes
skip and repeat no sample: ``{"step": 12, "ids": [...]}`` per step and data-parallel rank.

The log is the history of the run as it stands: a resume from step K first drops every
row after step K (steps that a failed attempt trained past its last checkpoint, and that
the resumed attempt trains again, possibly on another number of ranks), so each step
appears once per rank of the attempt that trained it for good.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from neural_arch.training.jsonl import append_row, read_rows
from neural_arch.utils.atomic import commit_file

__all__ = ["append_samples", "forget_samples_after"]


def _logs(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "logs").glob("samples_rank_*.jsonl"))


def append_samples(run_dir: Path, rank: int, step: int, ids: Sequence[int]) -> None:
    """Add the ids this rank trained on at ``step``."""
    append_row(run_dir / "logs" / f"samples_rank_{rank}.jsonl", {"step": step, "ids": [int(i) for i in ids]})


def forget_samples_after(run_dir: Path, step: int) -> None:
    """Drop the rows of steps after ``step`` from every rank's log (rank 0, before training on).

    Every rank's file, not only the current ranks': an attempt on more ranks left files that
    an attempt on fewer ranks does not write. Safe without a barrier: another rank's first
    row follows its first step, whose gradient all-reduce waits for rank 0.
    """
    for log in _logs(run_dir):
        kept = [row for row in read_rows(log) if isinstance(row.get("step"), int) and row["step"] <= step]
        if not kept:
            log.unlink()
        else:
            text = "".join(json.dumps(row) + "\n" for row in kept).encode()
            commit_file(log, lambda f, text=text: f.write(text))
