"""Which tracebacks a job's console has shown, so that a restart repeating one shows one line.

Used by the worker (``crash_report.py``), in a directory the launcher gives each job
(``--shown-dir``, in its scratch directory)::

    shown = ShownTracebacks(Path(shown_dir), rank=1, attempt=1)
    earlier = shown.repeat_of(text)  # (0, 0): rank 0 showed this text on attempt 0
    if earlier is None:
        print(text); shown.add(text)

Why: a deterministic bug fails every rank the same way on every attempt, so the console
showed the same traceback ranks x attempts times before the summary quoted it once more.
A repeat within one attempt is still shown (ranks of the first attempt may well differ,
and each rank's first failure deserves its text); on a later attempt a text the console
already showed, by any rank, is named instead.

Format: one empty file per showing, ``DIR/<digest>.rank<R>.attempt<A>``. Creating a file
is atomic, so ranks writing at once need no lock; the attempts of one job run one after
another, so everything an earlier attempt showed is on disk before a later one looks.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

_ENTRY = re.compile(r"\.rank(?P<rank>\d+)\.attempt(?P<attempt>\d+)$")


def digest(text: str) -> str:
    """A short name for a traceback's text."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class ShownTracebacks:
    """The tracebacks shown on this job's console, seen from one rank of one attempt."""

    directory: Path
    """Where the showings are recorded (one per job and node; the launcher's scratch)."""
    rank: int
    """The global rank asking."""
    attempt: int
    """Its attempt, 0 for the first start of the group (as the failure summary counts)."""

    def repeat_of(self, text: str) -> Optional[tuple[int, int]]:
        """(rank, attempt) of the first showing of ``text`` on an earlier attempt, or None."""
        earlier = []
        for entry in self.directory.glob(digest(text) + ".rank*.attempt*"):
            found = _ENTRY.search(entry.name)
            if found and int(found["attempt"]) < self.attempt:
                earlier.append((int(found["attempt"]), int(found["rank"])))
        if not earlier:
            return None
        attempt, rank = min(earlier)
        return rank, attempt

    def add(self, text: str) -> None:
        """Record that this rank showed ``text`` on this attempt."""
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / f"{digest(text)}.rank{self.rank}.attempt{self.attempt}").touch()
