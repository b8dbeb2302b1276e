"""Training progress on the console: a tqdm bar on a terminal, plain periodic lines otherwise.

Used by reporting.py: ``progress = open_progress(total_steps, start_step)``, then
``progress.update(step, loss, samples_per_s)`` each step and ``progress.close()``. A bar
redraws itself with ``\\r``, which in a log file, a pipe or under the launcher (whose workers
write to a pipe) becomes one line thousands of characters long; there, one line is printed at
most every ``LINE_INTERVAL_S`` seconds, and at the end.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO, Union

LINE_INTERVAL_S = 10.0
"""Seconds between two plain progress lines: a log stays readable, a watcher still sees motion."""


class BarProgress:
    """tqdm's bar, for a terminal."""

    def __init__(self, total: int, start: int, stream: TextIO) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, mininterval=1.0, file=stream)

    def update(self, step: int, loss: float, samples_per_s: float) -> None:
        self.bar.update(step - self.bar.n)
        if loss == loss:  # not NaN: a loss has been logged
            self.bar.set_postfix(loss=f"{loss:.4g}", samples_s=f"{samples_per_s:.0f}", refresh=False)

    def close(self) -> None:
        self.bar.close()


class LineProgress:
    """``step 120/500 (24%) loss 0.0123 850 samples/s elapsed 0:12 left 0:38``, one line at a time."""

    def __init__(
        self,
        total: int,
        start: int,
        stream: TextIO,
        interval_s: float = LINE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.start, self.stream, self.interval_s, self.clock = total, start, stream, interval_s, clock
        self.began = clock()
        self.last_line: Optional[float] = None  # when the last line was printed; None: none yet
        self.shown: Optional[int] = None  # the step that line showed
        self.latest: Optional[tuple[int, float, float]] = None

    def update(self, step: int, loss: float, samples_per_s: float) -> None:
        self.latest = (step, loss, samples_per_s)
        now = self.clock()
        if self.last_line is None or now - self.last_line >= self.interval_s:
            self._print(now)

    def close(self) -> None:
        """The last step reached, unless the last line already showed it."""
        if self.latest is not None and self.latest[0] != self.shown:
            self._print(self.clock())

    def _print(self, now: float) -> None:
        assert self.latest is not None
        step, loss, rate = self.latest
        parts = [f"step {step}/{self.total} ({step / max(self.total, 1):.0%})"]
        if loss == loss:  # not NaN: a loss has been logged
            parts.append(f"loss {loss:.4g}")
        parts += [f"{rate:.0f} samples/s", f"elapsed {_clock_text(now - self.began)}"]
        done = step - self.start
        if 0 < done and step < self.total:
            parts.append(f"left {_clock_text((now - self.began) / done * (self.total - step))}")
        print(" ".join(parts), file=self.stream, flush=True)
        self.last_line, self.shown = now, step


Progress = Union[BarProgress, LineProgress]


def open_progress(total: int, start: int, stream: Optional[TextIO] = None) -> Progress:
    """A bar when ``stream`` (default: stderr, where tqdm writes) is a terminal, else lines."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return BarProgress(total, start, stream)
    return LineProgress(total, start, stream)


def _clock_text(seconds: float) -> str:
    """``75.2`` -> ``1:15``; ``3725`` -> ``1:02:05``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
