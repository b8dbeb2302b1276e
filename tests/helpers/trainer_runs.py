"""The tiny float64 training runs the trainer tests start, and the launcher run that kills a rank.

Use: ``cli("train", *BASE, "--set", f"run.dir={run}")`` (tests.helpers.cli) for the regression
MLP, ``gpt_args(make_corpus(root))`` for the byte-level GPT; ``launch_fault("kill", 7, 2, *BASE, ...)``
runs tests/scripts/train_fault.py under the launcher with one restart allowed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional

from tests.helpers.gpt_corpus import CONTEXT, VAL_FRACTION
from tests.helpers.paths import SCRIPTS

FAULT = str(SCRIPTS / "train_fault.py")
"""``train_fault.py MODE STEP ARGS``: a training run that SIGKILLs rank 1 after STEP, or rank 0
half-way through writing STEP's checkpoint, on the first attempt only."""
COMMON = [
    "--set",
    "training.precision=fp64",
    "--set",
    "logging.progress=false",
    "--set",
    "logging.tensorboard=false",
    "--set",
    "checkpoint.every_steps=4",
    "--set",
    "schedule.warmup_steps=3",
    "--set",
    "training.timeout=60",
]
"""Every run: float64 (so only summation order differs across world sizes), quiet, a checkpoint every 4 steps."""
# 101 training samples / global batch 12: every epoch ends with a 5-sample batch; 25
# validation samples are not divisible by 3 ranks.
BASE = [
    *COMMON,
    "--set",
    "data.num_samples=101",
    "--set",
    "data.val_samples=25",
    "--set",
    "training.global_batch_size=12",
    "--set",
    "model.hidden=8",
]
"""The regression MLP's run (the default task)."""

QUIET_SMALL = [
    "data.num_samples=48",
    "data.val_samples=8",
    "model.hidden=8",
    "logging.progress=false",
    "logging.tensorboard=false",
    "checkpoint.every_steps=0",
]
"""``load_config(None, ["training.steps=N", *QUIET_SMALL, f"run.dir={run}"])``: an in-process run of
the default regression task on 48 samples, no progress bar, no event files, no checkpoints."""


TWENTY_STEPS = [
    f"{k}={v}"
    for k, v in {
        "training.steps": 20,
        "training.global_batch_size": 12,
        "training.grad_accum_steps": 2,
        "data.num_samples": 101,
        "data.val_samples": 25,
        "model.hidden": 8,
        "training.precision": "fp64",
        "logging.every_steps": 1,
        "logging.progress": "false",
        "logging.tensorboard": "false",
        "checkpoint.every_steps": 0,
    }.items()
]
"""In-process ``train(load_config(None, [*TWENTY_STEPS, f"run.dir={run}"]))`` of the regression MLP:
101 samples / 12 per step, 2 micro-batches; 20 steps cross two epoch ends and uneven batches."""


def gpt_args(corpus: Path) -> list[str]:
    """A tiny GPT (d_model 16, 2 blocks, context 16), Adam; 27 windows per epoch in batches of 6,
    so an epoch is 5 steps ending with 3 samples (2 + 1 on two ranks, 1 + 1 + 1 on three).
    ``corpus`` is ``make_corpus(root)`` (tests.helpers.gpt_corpus)."""
    return [
        *COMMON,
        "--set",
        "run.task=gpt",
        "model.d_model=16",
        "model.n_layers=2",
        "model.n_heads=2",
        "model.mlp_ratio=2",
        f"model.context={CONTEXT}",
        f"data.val_fraction={VAL_FRACTION}",
        f"data.source={corpus.parent / 'src'}",
        f"data.path={corpus}",
        "data.samples_per_epoch=27",
        "training.global_batch_size=6",
        "optim.name=adam",
        "optim.lr=0.003",
    ]


def launch_fault(
    mode: str,
    step: int,
    ranks: int,
    *args: str,
    env: Optional[Mapping[str, str]] = None,
    restarts: int = 1,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """``train_fault.py`` on ``ranks`` processes under the launcher (``--max_restarts=restarts``);
    ``mode`` is ``none`` (no fault), ``kill``, ``kills`` or ``ckpt`` (see the script); ``env`` adds variables."""
    cmd = [
        sys.executable,
        "-m",
        "neural_arch.distributed.launcher",
        f"--nproc_per_node={ranks}",
        f"--max_restarts={restarts}",
        FAULT,
        mode,
        str(step),
        *args,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    )


def copied_run(run: Path, dest: Path) -> Path:
    """A copy of the finished run ``run`` at ``dest`` (its links kept, its lock dropped), for a
    test that changes or restarts it while ``run`` stays as a module fixture made it."""
    shutil.copytree(run, dest, symlinks=True)
    (dest / ".lock").unlink(missing_ok=True)
    return dest
