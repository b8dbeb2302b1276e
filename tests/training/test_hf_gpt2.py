"""A Hugging Face GPT-2 as a custom app trains exactly on every layout, with no plan written.

Run: ``.venv/bin/python -m pytest tests/training/test_hf_gpt2.py -q``
``tests/helpers/hf_gpt2_task.py``: ``GPT2LMHeadModel`` from a ``GPT2Config`` (2 blocks, width
64, 2 heads, 256 byte tokens, context 16; no download), float64, dropout 0.1 as Hugging Face
defaults it, on the bytes of a local text; 27 training windows in global batches of 6 (every
epoch ends with 3 samples), Adam, 8 steps.
One process, DDP x2, FSDP x2 and FSDP x2 with activation checkpointing (blocks found by
``infer_plan``) end with the same losses and weights within 1e-10, and so does a run whose
rank is killed after step 6 on FSDP x2 and which resumes from step 4 (mid-epoch) on one process.
Skipped where ``transformers`` (the dev extra) is not installed.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import cli
from tests.helpers.gpt_corpus import write_texts
from tests.helpers.paths import REPO
from tests.helpers.run_outputs import assert_params, final_params, metrics
from tests.helpers.trainer_runs import COMMON, FAULT

pytest.importorskip("transformers", reason="transformers (the dev extra) is not installed")
pytestmark = pytest.mark.multiprocess

DROPOUT = 0.1
"""GPT-2's dropout, as Hugging Face defaults it: exact on every layout because the trainer keys each
sample's masks by (seed, step, sample id, call number)."""
STEPS = 8
ENV = {"PYTHONPATH": str(REPO)}  # the workers import the task by its path


def args(text: Path, run: Path, *extra: str) -> list[str]:
    """``neural-arch train`` arguments of the HF GPT-2 run into ``run``; ``extra`` are more ``--set`` values."""
    return [
        *COMMON,
        "--set",
        "run.task=tests.helpers.hf_gpt2_task:HFGPT2Task",
        f"run.dir={run}",
        f"data.text={text}",
        f"model.dropout={DROPOUT}",
        "training.global_batch_size=6",
        f"training.steps={STEPS}",
        "training.val_every=4",
        "logging.every_steps=1",
        "schedule.decay=constant",
        "optim.name=adam",
        "optim.lr=0.003",
        *extra,
    ]


def train(text: Path, run: Path, procs: int, *extra: str) -> subprocess.CompletedProcess[str]:
    proc = cli("train", *args(text, run, *extra), "--nproc-per-node", str(procs), cwd=REPO, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def losses(run: Path) -> dict[int, float]:
    return {row["step"]: row["train/loss"] for row in metrics(run) if "train/loss" in row}


def assert_same_run(got: Path, want: Path) -> None:
    """Final parameters, every logged loss and every validation loss within 1e-10."""
    assert_params(final_params(got), final_params(want), atol=1e-10)
    a, b = losses(got), losses(want)
    assert a.keys() == b.keys() and len(a) == STEPS, (a, b)
    for step in a:
        assert math.isclose(a[step], b[step], rel_tol=0, abs_tol=1e-10), (step, a[step], b[step])
    val_a = [row["val/loss"] for row in metrics(got) if "val/loss" in row]
    val_b = [row["val/loss"] for row in metrics(want) if "val/loss" in row]
    assert len(val_a) == len(val_b) >= 2, (val_a, val_b)
    assert all(math.isclose(x, y, rel_tol=0, abs_tol=1e-10) for x, y in zip(val_a, val_b)), (val_a, val_b)


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    folder = write_texts(tmp_path_factory.mktemp("hf") / "src")
    path = folder.parent / "text.txt"
    path.write_bytes(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.txt"))))
    return path


@pytest.fixture(scope="module")
def reference(text, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ref") / "run"
    train(text, run, 1)
    return run


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "layout",
    [[], ["parallel.dp_shard=2"], ["parallel.dp_shard=2", "parallel.activation_checkpointing=1"]],
    ids=["ddp2", "fsdp2", "fsdp2+checkpointing"],
)
def test_two_processes_equal_one(text, reference, tmp_path, layout):
    run = tmp_path / "run"
    train(text, run, 2, *layout)
    assert_same_run(run, reference)


@pytest.mark.timeout(900)
def test_killed_on_fsdp_resumes_mid_epoch_on_one_process(text, reference, tmp_path):
    """Rank 1 SIGKILLs itself after step 6 of an FSDP x2 run with checkpointing (no restart
    allowed: the job fails); the run resumes from step 4 (mid-epoch: 5 steps an epoch) on one process."""
    run = tmp_path / "run"
    layout = ["parallel.dp_shard=2", "parallel.activation_checkpointing=1"]
    cmd = [sys.executable, "-m", "neural_arch.distributed.launcher", "--nproc_per_node=2", "--max_restarts=0"]
    killed = subprocess.run(
        [*cmd, FAULT, "kill", "6", *args(text, run, *layout)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **ENV),
    )
    assert killed.returncode != 0, killed.stdout[-3000:] + killed.stderr[-3000:]
    train(text, run, 1)
    assert "resumed from step 4" in (run / "logs" / "rank_0.log").read_text()
    assert_same_run(run, reference)
