"""``loss.png`` off the run's critical path: a helper process imports matplotlib while the run trains.

Used by reporting.py's ``RunReporter`` (rank 0)::

    plot = LossPlot.start()                     # at the run's start: the helper imports matplotlib meanwhile
    plot.draw(run_dir / "metrics.jsonl", run_dir / "loss.png")   # after the last row: returns at once
    ...                                         # the task's report, the summary on stdout
    why = plot.wait()                           # loss.png is there, or why not (None: drawn); never raises
    plot.close()                                # a stopped run: no plot

Why a process: importing matplotlib and drawing its first figure took 1-3 s under load, at the end of
every run, on rank 0 while the other ranks waited to exit. Started with the run, the helper does
that on another core while the run builds, trains and validates; at the end only the drawing is
left, done while the task writes its report. A thread would hold the interpreter's lock for the
import. The helper ends with its parent (``PR_SET_PDEATHSIG``, and at the end of its input); where
it cannot start or dies, the plot is drawn here as before. A plot that fails is one line on stdout.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import weakref
from pathlib import Path
from typing import IO, Any, Optional

from neural_arch.training.jsonl import read_rows
from neural_arch.utils.atomic import commit_file

PLOT_SECONDS = 60.0
"""The longest the end of a run waits for the helper's plot (it was asked seconds before; a busy
machine's import takes a few seconds). Past it the run ends without loss.png, saying so."""
_SERVE = "import sys; sys.path.insert(0, sys.argv[1]); from neural_arch.training.loss_plot import serve; serve()"


def plot_losses(metrics_path: Path, out_png: Path) -> None:
    """Train (and validation, if any) loss against step, from metrics.jsonl. Without pyplot: its
    import is slower and its global state is not thread-safe."""
    from matplotlib.figure import Figure

    rows = [r for r in read_rows(metrics_path) if isinstance(r.get("step"), int)]  # a torn line is skipped
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for key, label in (("train/loss", "train"), ("val/loss", "validation")):
        points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if points:
            ax.plot(*zip(*points), marker="." if label == "validation" else None, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.12, top=0.97)  # fixed: tight_layout draws it all twice
    commit_file(out_png, lambda f: fig.savefig(f, format="png", dpi=120))  # a full disk leaves the old plot


class LossPlot:
    """One run's loss plot, drawn by a helper process where one starts, else here."""

    def __init__(self, proc: Optional[subprocess.Popen[str]]) -> None:
        self.proc = proc
        self.asked: Optional[tuple[Path, Path]] = None
        # Ended by close(), or when this object goes (a run that failed): the helper never outlives the run.
        self._ended = weakref.finalize(self, _end, proc) if proc is not None else None

    @classmethod
    def start(cls) -> LossPlot:
        """Start the helper (it imports matplotlib and draws a warm-up figure, then waits)."""
        root = str(Path(__file__).resolve().parents[2])  # where this neural_arch is imported from
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE, root, str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "MPLBACKEND": "Agg"},
            )
        except OSError:
            proc = None
        return cls(proc)

    def draw(self, metrics_path: Path, out_png: Path) -> None:
        """Ask for the plot of ``metrics_path`` (complete by now) in ``out_png``; returns at once."""
        self.asked = (metrics_path, out_png)
        if self.proc is not None:
            try:
                _send(self.proc.stdin, {"metrics": str(metrics_path), "out": str(out_png)})
            except (OSError, ValueError):  # the helper is gone: drawn here in wait()
                self.close()

    def wait(self) -> Optional[str]:
        """Once ``draw`` was asked: wait for the plot (at most ``PLOT_SECONDS``); None when drawn,
        else why not (never raises)."""
        if self.asked is None:
            return None
        answer = _answer(self.proc, PLOT_SECONDS) if self.proc is not None else None
        self.close()
        if answer is None:  # no helper, or it died: draw here
            try:
                plot_losses(*self.asked)
                answer = "ok"
            except Exception as exc:  # noqa: BLE001 - a plot never fails a run
                answer = f"{type(exc).__name__}: {exc}"
        return None if answer == "ok" else answer

    def close(self) -> None:
        if self._ended is not None:
            self._ended()  # at most once
        self.proc = None


def _send(stream: Optional[IO[str]], request: dict[str, Any]) -> None:
    assert stream is not None
    stream.write(json.dumps(request) + "\n")
    stream.flush()


def _answer(proc: subprocess.Popen[str], seconds: float) -> Optional[str]:
    """The helper's one-line answer; None if it died without one; why, if it took too long."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    if not ready:
        return f"not drawn within {seconds:.0f} s"
    line = proc.stdout.readline().strip()
    return line or None


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                stream.close()
            except OSError:  # the helper had gone: its pipe is broken
                pass


def serve() -> None:
    """The helper's main: import and warm matplotlib up, then draw each requested plot (one JSON
    line in, one answer line out: ``ok`` or the error) until the input ends."""
    _die_with_parent(int(sys.argv[2]))
    try:
        import io

        from matplotlib.figure import Figure

        warm = Figure()
        axes = warm.add_subplot()
        axes.plot([1, 2], [1, 10], label="x")  # a log axis and a legend: fonts, mathtext and Agg loaded now
        axes.set_yscale("log")
        axes.legend()
        warm.savefig(io.BytesIO(), format="png")
    except Exception:  # noqa: BLE001 - reported at the first request
        pass
    for line in sys.stdin:
        try:
            request = json.loads(line)
            plot_losses(Path(request["metrics"]), Path(request["out"]))
            answer = "ok"
        except Exception as exc:  # noqa: BLE001 - the run says it in one line and goes on
            answer = " ".join(f"{type(exc).__name__}: {exc}".split())
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


def _die_with_parent(parent: int) -> None:
    """Linux: end when the run's process ends, even mid-import (elsewhere: at the end of the input)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the request took effect
        os._exit(0)
