"""The end of a run's outputs: the task's report, then (rank 0) summary.txt/summary.json and the
summary on stdout.

Used by trainer.py's ``_finish``, after the final validation::

    task_report(components, run_dir, final, throughput)   # every rank (collective where sharded)
    if rank == 0:
        write_outputs(run_dir, task, final, throughput, per_rank, samples, straggler_note, stopped)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch

import neural_arch.distributed as nd
from neural_arch.training.components import TrainingComponents
from neural_arch.training.reporting import format_summary
from neural_arch.training.task import Task
from neural_arch.utils.atomic import commit_file


def step_times_per_rank(times: list[float]) -> list[tuple[float, float]]:
    """Every rank's (mean, max) seconds per step, from this rank's ``times`` (collective)."""
    mean_max = torch.tensor([sum(times) / max(len(times), 1), max(times, default=0.0)], dtype=torch.float64)
    return [(float(a), float(b)) for a, b in nd.all_gather(mean_max)]


def run_throughput(samples: int, steps: int, seconds: float) -> dict[str, float]:
    """The run's throughput numbers (summary.json, the task's report)."""
    return {
        "processes": float(nd.get_world_size()),
        "samples_per_s": samples / max(seconds, 1e-9),
        "train_seconds": seconds,
        "steps": float(steps),
    }


def task_report(
    components: TrainingComponents, run_dir: Path, final: dict[str, float], throughput: dict[str, float]
) -> None:
    """The app's report: on every rank with the placed model where the app can, else on rank 0."""
    task, placement = components.task, components.placement
    if task.REPORT_ON_EVERY_RANK and placement.report_on_every_rank:
        with placement.evaluation():  # collective forwards, FSDP gathered once where it fits
            task.report(run_dir, placement.plain, final, throughput)
        return
    whole = placement.whole_model(task.build_model)  # collective for sharded layouts
    if nd.get_rank() == 0:
        task.report(run_dir, whole, final, throughput)


def write_outputs(
    run_dir: Path,
    task: Task,
    final: dict[str, float],
    throughput: dict[str, float],
    per_rank: list[tuple[float, float]],
    samples: int,
    straggler_note: str,
    stopped: Optional[tuple[int, int, str]],
) -> None:
    """Rank 0, after the task's report: summary.txt/summary.json, the summary on stdout (loss.png is
    drawn meanwhile: reporting.py). ``stopped``: (step, steps, why) of a run a callback stopped early."""
    seconds, world = throughput["train_seconds"], nd.get_world_size()
    summary = format_summary(task.summary_metrics(final), seconds, samples, per_rank, world)
    summary += f"\n{straggler_note}" if straggler_note else ""
    values: dict[str, object] = {**throughput, **final}
    if stopped is not None:
        step, steps, why = stopped
        summary = f"stopped early at step {step} of {steps}: {why}\n{summary}"
        values.update(stopped_early_at_step=step, stopped_early_reason=why)
    text = json.dumps(values, indent=2) + "\n"
    commit_file(run_dir / "summary.txt", lambda f: f.write((summary + "\n").encode()))  # full disk: old or none
    commit_file(run_dir / "summary.json", lambda f: f.write(text.encode()))
    print(summary, flush=True)
