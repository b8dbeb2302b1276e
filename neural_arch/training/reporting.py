"""What a user sees of a run: progress (progress.py), per-rank logs, metrics.jsonl, TensorBoard, loss.png.

Used by trainer.py: ``RunReporter(run_dir, rank, total_steps, ...)``. Rank 0 writes the
shared outputs; every rank writes ``run_dir/logs/rank_N.log``. ``loss.png`` is drawn by a
helper process started with the run (loss_plot.py): ``draw_losses()`` once the last row is
written, ``end(finished=True)`` waits for it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Optional, Sequence

from neural_arch.training.jsonl import append_row
from neural_arch.training.loss_plot import LossPlot
from neural_arch.training.progress import Progress, open_progress
from neural_arch.training.tracking import Tracker
from neural_arch.utils.safe_files import open_no_follow


class RunReporter:
    """Per-rank log file; on rank 0 also the progress (a bar on a terminal, plain periodic lines
    elsewhere: progress.py), metrics.jsonl and TensorBoard."""

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        total_steps: int,
        start_step: int,
        progress: bool,
        tensorboard: bool,
        trackers: Sequence[Tracker] = (),
        plot: Optional[LossPlot] = None,
    ) -> None:
        self.run_dir, self.rank, self.trackers = run_dir, rank, trackers
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.log = logging.getLogger(f"neural_arch.train.rank{rank}.{id(self)}")
        self.log.setLevel(logging.INFO)
        self.log.propagate = False
        handler = NoFollowFileHandler(run_dir / "logs" / f"rank_{rank}.log")
        handler.setFormatter(logging.Formatter(f"%(asctime)s [rank {rank}] %(message)s"))
        self.log.addHandler(handler)
        self.bar: Optional[Progress] = None
        self.tb: Any = None
        self.plot = plot if rank == 0 else None
        """loss.png's helper process (loss_plot.py), started with the run; without one, no loss.png."""
        if rank == 0:
            if progress:
                self.bar = open_progress(total_steps, start_step)  # stderr: a bar on a terminal, else lines
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def metrics(self, step: int, values: dict[str, float]) -> None:
        """Record one row of metrics (rank 0 writes; all ranks log it)."""
        self.log.info("step %d %s", step, " ".join(f"{k}={v:.6g}" for k, v in values.items()))
        if self.rank != 0:
            return
        append_row(self.run_dir / "metrics.jsonl", {"step": step, **values})
        for tracker in self.trackers:
            tracker.log_row(step, values)
        if self.tb is not None:
            for key, value in values.items():
                self.tb.add_scalar(key, value, step)

    def progress(self, step: int, loss: float, samples_per_s: float) -> None:
        """Advance the progress to ``step`` with the current loss and throughput."""
        if self.bar is not None:
            self.bar.update(step, loss, samples_per_s)

    def draw_losses(self) -> None:
        """Ask for loss.png, now that the last metrics row is written; ``end`` waits for it."""
        if self.plot is not None and (self.run_dir / "metrics.jsonl").exists():
            self.plot.draw(self.run_dir / "metrics.jsonl", self.run_dir / "loss.png")

    def end(self, finished: bool) -> None:
        """A finished run: loss.png drawn (a failed plot is one line, never an error), then MLflow
        and W&B get the outputs as files and end; a stopped one: no plot, the trackers left to resume."""
        if self.plot is not None:
            why = self.plot.wait() if finished else None
            self.plot.close()
            if why:
                print(f"note: loss.png not drawn ({why}); the run's other outputs are complete", flush=True)
        for tracker in self.trackers:
            tracker.finish(self.run_dir) if finished else tracker.pause()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
        for handler in list(self.log.handlers):
            handler.close()
            self.log.removeHandler(handler)


class NoFollowFileHandler(logging.FileHandler):
    """``logging.FileHandler`` appending without following a symlink (one planted in the run
    directory would otherwise have every log line written wherever it points)."""

    def _open(self) -> Any:
        fd = open_no_follow(Path(self.baseFilename), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)


def format_summary(
    final: dict[str, float], seconds: float, samples: int, step_times: list[tuple[float, float]], world: int
) -> str:
    """A one-screen end-of-run summary of ``final`` (the task's summary metrics);
    ``step_times`` = per-rank (mean, max) seconds."""
    lines = [f"finished in {seconds:.1f} s on {world} process(es): {samples / max(seconds, 1e-9):.1f} samples/s"]
    lines += [f"  {k:16s} {v:.6g}" for k, v in final.items()]  # the task chose which (Task.summary_metrics)
    means = [m for m, _ in step_times]
    if means:
        slowest = max(range(len(means)), key=lambda r: means[r])
        spread = (max(means) - min(means)) / max(min(means), 1e-12)
        lines.append(
            f"  step time per rank (mean ms): {', '.join(f'{m * 1e3:.1f}' for m in means)}; "
            f"spread {spread:.0%}, slowest rank {slowest}"
        )
    return "\n".join(lines)
