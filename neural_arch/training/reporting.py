"""What a user sees of a run: progress (progress.py), per-rank logs, metrics.jsonl, TensorBoard, loss.png.

Used by trainer.py: ``RunReporter(run_dir, rank, total_steps, ...)``. Rank 0 writes the
shared outputs; every rank writes ``run_dir/logs/rank_N.log``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Optional, Sequence

from neural_arch.training.jsonl import append_row, read_rows
from neural_arch.training.progress import Progress, open_progress
from neural_arch.training.tracking import Tracker
from neural_arch.utils.atomic import commit_file
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

    def end_tracking(self, finished: bool) -> None:
        """MLflow, W&B: a finished run gets the outputs as files and ends; a stopped one is left to resume."""
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


def plot_losses(metrics_path: Path, out_png: Path) -> None:
    """Train (and validation, if any) loss against step, from metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_rows(metrics_path) if isinstance(r.get("step"), int)]  # a torn line is skipped
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("train/loss", "train"), ("val/loss", "validation")):
        points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        if points:
            ax.plot(*zip(*points), marker="." if label == "validation" else None, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    commit_file(out_png, lambda f: fig.savefig(f, format="png", dpi=120))  # a full disk leaves the old plot
    plt.close(fig)


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
