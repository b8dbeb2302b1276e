"""Name a slow rank while it is slow: its forward time against the other ranks', every metrics row.

Used by trainer.py::

    watch = StragglerWatch(hosts, threshold=0.2, intervals=3)   # hosts: every rank's host name
    for line in watch.check(forward_seconds_per_rank, step):     # each metrics row, every rank alike
        print(line)
    watch.warnings                                               # per rank, for the summary

Why the forward: in data parallelism every rank's step lasts as long as the slowest one's, because
the gradient all-reduce waits for it; only the time a rank spends before that sync shows who is
slow. A rank whose forward stays more than ``threshold`` above the median of all ranks (for an even
count the lower middle value, so one slow rank of two is compared with the other) for
``intervals`` rows in a row gets one warning; it may get another after it has recovered.
"""

from __future__ import annotations

import statistics


class StragglerWatch:
    """Per-rank streaks of slow metrics intervals, and the warnings given so far."""

    def __init__(self, hosts: list[str], threshold: float, intervals: int) -> None:
        self.hosts, self.threshold, self.intervals = hosts, threshold, intervals
        self.streak = [0] * len(hosts)
        self.warnings = [0] * len(hosts)
        self._warned = [False] * len(hosts)

    def check(self, seconds: list[float], step: int) -> list[str]:
        """One line for each rank that has just become a straggler at ``step`` (``seconds``: every
        rank's mean forward per step over the last metrics interval)."""
        base = statistics.median_low(seconds)
        lines = []
        for rank, value in enumerate(seconds):
            slow = base > 0 and value > base * (1 + self.threshold)
            self.streak[rank] = self.streak[rank] + 1 if slow else 0
            if not slow:
                self._warned[rank] = False
            elif self.streak[rank] >= self.intervals and not self._warned[rank]:
                self._warned[rank] = True
                self.warnings[rank] += 1
                lines.append(
                    f"straggler at step {step}: rank {rank} on {self.hosts[rank]} spends {value * 1e3:.2f} ms per "
                    f"step before the gradient sync against the median {base * 1e3:.2f} ms "
                    f"(+{value / base - 1:.0%}) for {self.streak[rank]} metrics intervals"
                )
        return lines

    def summary(self) -> str:
        """``straggler warnings: rank 1 (host) 2`` for the end-of-run summary; '' when there were none."""
        named = [f"rank {r} ({self.hosts[r]}) {n}" for r, n in enumerate(self.warnings) if n]
        return f"  straggler warnings: {', '.join(named)}" if named else ""
