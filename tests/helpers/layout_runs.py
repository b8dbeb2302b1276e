"""``neural-arch train`` of the tiny float64 GPT on a parallel layout, compared with one process.

Use: ``train(ref, corpus, 10)``; ``train(run, corpus, 10, "--set", "parallel.tp=2", procs=2)``;
``assert_same_run(run, ref)`` and ``assert same_samples(run, ref)``. ``corpus`` is
``make_corpus(root)`` (tests.helpers.gpt_corpus); the run is ``gpt_args`` (tests.helpers.trainer_runs)
with the loss logged at every step and sample ids recorded. Tolerances: parameters within
1e-10, every logged loss and the validation bits per byte within 1e-12 relative (float64:
only summation order differs).
"""

from __future__ import annotations

import math
from pathlib import Path

from tests.helpers.cli import cli
from tests.helpers.run_outputs import assert_params, final_params, metrics, sample_ids
from tests.helpers.trainer_runs import gpt_args

EVERY_STEP = [
    "--set",
    "logging.every_steps=1",
    "training.val_every=5",
    "schedule.decay=constant",
    "logging.record_samples=true",
]
"""A row of metrics at every step, validation every 5, the learning rate constant, sample ids recorded."""


def train(run: Path, corpus: Path, steps: int, *extra: str, procs: int = 1) -> None:
    """Train the GPT into ``run`` up to ``steps`` on ``procs`` processes; ``extra`` are more arguments."""
    proc = cli(
        "train",
        *gpt_args(corpus),
        *EVERY_STEP,
        "--set",
        f"run.dir={run}",
        f"training.steps={steps}",
        *extra,
        "--nproc-per-node",
        str(procs),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def losses(run: Path) -> dict[int, float]:
    """step -> the logged training loss."""
    return {row["step"]: row["train/loss"] for row in metrics(run) if "train/loss" in row}


def assert_same_run(got: Path, want: Path) -> None:
    """Final parameters within 1e-10, every logged loss and validation bits per byte within 1e-12 relative."""
    assert_params(final_params(got), final_params(want), atol=1e-10)
    a, b = losses(got), losses(want)
    assert a.keys() == b.keys()
    for step in a:
        assert math.isclose(a[step], b[step], rel_tol=1e-12), (step, a[step], b[step])
    val_a = [r["val/bpb"] for r in metrics(got) if "val/bpb" in r]
    val_b = [r["val/bpb"] for r in metrics(want) if "val/bpb" in r]
    assert len(val_a) == len(val_b) >= 2 and all(math.isclose(x, y, rel_tol=1e-12) for x, y in zip(val_a, val_b))


def same_samples(run: Path, reference: Path) -> bool:
    """Each step saw the reference step's sample ids, each once (tensor/pipeline peers record none)."""
    ids = {step: sorted(ids) for step, ids in sample_ids(run, 1).items()}
    return ids == {step: sorted(ids) for step, ids in sample_ids(reference, 1).items()}
