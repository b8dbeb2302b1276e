"""The trainer: equivalence across world sizes, crash-exact and resize-exact resume, outputs.

Run: ``.venv/bin/python -m pytest tests/training/test_trainer.py``
Runs are real: ``neural-arch train`` / the launcher start 1-3 gloo workers. float64 model
and data (training.precision=fp64); tolerances: bitwise for crash-resume on the same world
size, atol 1e-10 across world sizes (only summation order differs). Crash and resize
tests run for every app in ``APPS`` (the regression MLP and a tiny byte-level GPT).
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from neural_arch.training import step as step_module
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train
from tests.helpers.cli import cli
from tests.helpers.gpt_corpus import make_corpus
from tests.helpers.run_outputs import assert_params, final_params, metrics, sample_ids
from tests.helpers.trainer_runs import BASE, gpt_args, launch_fault

APPS = ["regression", "gpt"]


@pytest.fixture(scope="module", params=APPS)
def app(request, tmp_path_factory) -> list[str]:
    """The ``neural-arch train`` arguments of one app's tiny float64 run."""
    if request.param == "regression":
        return BASE
    return gpt_args(make_corpus(tmp_path_factory.mktemp("gpt")))


@pytest.fixture(scope="module")
def reference_2_ranks(tmp_path_factory, app):
    """An uninterrupted 2-rank run of 20 steps (constant LR after warmup, sample ids recorded)."""
    run = tmp_path_factory.mktemp("ref") / "run"
    proc = launch_fault(
        "none",
        0,
        2,
        *app,
        "--set",
        f"run.dir={run}",
        "--set",
        "training.steps=20",
        "--set",
        "schedule.decay=constant",
        "--set",
        "logging.record_samples=true",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run


@pytest.mark.multiprocess
def test_three_ranks_equal_one_rank_with_accumulation_and_uneven_batches(tmp_path):
    common = [
        *BASE,
        "--set",
        "training.steps=18",
        "--set",
        "training.grad_accum_steps=2",
        "--set",
        "training.val_every=6",
    ]
    one = cli("train", *common, "--set", f"run.dir={tmp_path / 'one'}")
    three = cli("train", *common, "--set", f"run.dir={tmp_path / 'three'}", "--nproc-per-node", "3")
    assert one.returncode == 0, one.stderr
    assert three.returncode == 0, three.stdout + three.stderr
    assert_params(final_params(tmp_path / "one"), final_params(tmp_path / "three"), atol=1e-10)
    val_one = [r for r in metrics(tmp_path / "one") if "val/loss" in r]
    val_three = [r for r in metrics(tmp_path / "three") if "val/loss" in r]
    assert len(val_one) == len(val_three) >= 3
    for a, b in zip(val_one, val_three):  # exact global averages over 25 = 9 + 8 + 8 samples
        assert a["step"] == b["step"]
        assert b["val/loss"] == pytest.approx(a["val/loss"], rel=1e-12)
        assert b["val/mae"] == pytest.approx(a["val/mae"], rel=1e-12)


@pytest.mark.parametrize(
    "mode, step",
    [
        ("kill", 7),  # SIGKILL of rank 1 at step 7: mid-epoch (9 or 5 batches per epoch); the last checkpoint is step 4
        ("ckpt", 8),  # SIGKILL half-way through writing the step-8 checkpoint
    ],
)
@pytest.mark.multiprocess
def test_killed_rank_resumes_bitwise(tmp_path, app, reference_2_ranks, mode, step):
    run = tmp_path / "run"
    proc = launch_fault(
        mode, step, 2, *app, "--set", f"run.dir={run}", "--set", "training.steps=20", "--set", "schedule.decay=constant"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = (run / "logs" / "rank_0.log").read_text()
    assert "resumed from step 4" in log
    if mode == "ckpt":  # checkpoint.async_save (the default): the background writer died mid-write
        assert "killed while writing, in thread checkpoint-step-8" in proc.stdout, proc.stdout
    assert_params(final_params(run), final_params(reference_2_ranks), atol=0)


@pytest.mark.multiprocess
@pytest.mark.parametrize("new_world", [1, 3])
def test_resume_on_another_world_size_is_exact(tmp_path, app, reference_2_ranks, new_world):
    run = tmp_path / "run"
    common = [
        *app,
        "--set",
        f"run.dir={run}",
        "--set",
        "schedule.decay=constant",
        "--set",
        "logging.record_samples=true",
    ]
    first = launch_fault("none", 0, 2, *common, "--set", "training.steps=10")
    assert first.returncode == 0, first.stderr
    (run / "logs" / "samples_rank_0.jsonl").rename(run / "logs" / "before_0.jsonl")
    (run / "logs" / "samples_rank_1.jsonl").rename(run / "logs" / "before_1.jsonl")
    second = cli("train", *common, "--set", "training.steps=20", "--nproc-per-node", str(new_world))
    assert second.returncode == 0, second.stdout + second.stderr
    assert_params(final_params(run), final_params(reference_2_ranks), atol=1e-10)
    got, want = sample_ids(run, 11), sample_ids(reference_2_ranks, 11)
    assert sorted(got) == list(range(11, 21))
    for step in got:  # each global batch is the same set of samples, none skipped or repeated
        assert sorted(got[step]) == sorted(want[step]), step


@pytest.mark.multiprocess
def test_outputs_and_summary(tmp_path):
    run = tmp_path / "run"
    proc = cli(
        "train",
        *BASE,
        "--set",
        f"run.dir={run}",
        "--set",
        "training.steps=6",
        "--set",
        "logging.tensorboard=true",
        "--set",
        "training.val_every=3",
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("config.yaml", "metrics.jsonl", "loss.png", "summary.txt", "logs/rank_0.log"):
        assert (run / name).exists(), name
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert "samples/s" in proc.stdout and "val/loss" in proc.stdout and "step time per rank" in proc.stdout
    assert load_config(run / "config.yaml").training.steps == 6
    # step 6 is both a validation step and the end: validated once, one row
    assert [row["step"] for row in metrics(run) if "val/loss" in row] == [3, 6]


def test_non_finite_loss_stops_with_step_and_rank(tmp_path):
    cfg = load_config(
        None,
        [
            f"run.dir={tmp_path / 'run'}",
            "optim.lr=1e30",
            "training.steps=30",
            "logging.progress=false",
            "logging.tensorboard=false",
            "training.precision=fp64",
        ],
    )
    with pytest.raises(FloatingPointError, match=r"diverged at step \d+ \(non-finite loss on rank\(s\) \[0\]\)"):
        train(cfg)


def test_non_finite_loss_can_be_skipped(tmp_path, monkeypatch):
    cfg = load_config(
        None,
        [
            f"run.dir={tmp_path / 'run'}",
            "optim.lr=1e30",
            "training.steps=8",
            "logging.progress=false",
            "logging.tensorboard=false",
            "training.nan_policy=skip",
            "training.precision=fp64",
        ],
    )
    skipped = []
    real = step_module._non_finite
    monkeypatch.setattr(
        step_module, "_non_finite", lambda parts, *a: (skipped.append(parts.step + 1), real(parts, *a))[1]
    )
    train(cfg)  # completes
    assert skipped, "lr=1e30 should have produced a non-finite step"
    # A skipped step leaves the weights alone: without the skip they would be inf/nan by now.
    assert all(torch.isfinite(t).all() for t in final_params(tmp_path / "run").values())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "trainig.steps=5"], "did you mean 'training'"),
        (["--set", "training.stpes=5"], "did you mean 'training.steps'"),
        (["--set", "training.steps=ten"], "training.steps"),
        (["--set", "optim.lr=-1"], "optim.lr"),
        (["--set", "training.global_batch_size=10", "--nproc-per-node", "3"], "not divisible by world size 3"),
        (["--set", "data.name=file"], "data.path"),
        (["--set", "data.name=file", "--set", "data.path=/nonexistent/x.npz"], "/nonexistent/x.npz"),
        (["--set", "training.precision=fp8"], "training.precision"),
        (["--config", "/nonexistent/config.yaml"], "/nonexistent/config.yaml"),
        (["--set", "training.steps"], "training.steps"),
    ],
)
@pytest.mark.multiprocess
def test_config_errors_exit_2_with_one_line(args, message):
    proc = cli("train", *args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_bf16_autocast_on_cpu_trains(tmp_path):
    cfg = load_config(
        None,
        [
            f"run.dir={tmp_path / 'run'}",
            "training.precision=bf16",
            "training.steps=30",
            "logging.progress=false",
            "logging.tensorboard=false",
        ],
    )
    final = train(cfg)
    train_losses = [row["train/loss"] for row in metrics(tmp_path / "run") if "train/loss" in row]
    assert len(train_losses) >= 2 and np.isfinite(final["val/loss"])
    assert train_losses[-1] < 0.8 * train_losses[0], train_losses


def test_resume_none_and_explicit_path(tmp_path):
    base = [
        f"run.dir={tmp_path / 'run'}",
        "training.steps=8",
        "checkpoint.every_steps=4",
        "logging.progress=false",
        "logging.tensorboard=false",
        "training.precision=fp64",
        "schedule.decay=constant",
    ]
    log = tmp_path / "run" / "logs" / "rank_0.log"

    def last_start() -> str:
        return [line for line in log.read_text().splitlines() if "start: world" in line][-1]

    train(load_config(None, base))
    first = final_params(tmp_path / "run")
    # an explicit step directory continues from there: steps 5..8 again give the same weights
    train(load_config(None, base), resume=str(tmp_path / "run" / "checkpoints" / "step_00000004"))
    assert last_start().endswith("step 4 (resumed from step 4)")  # not auto (step 8), not none (step 0)
    assert_params(final_params(tmp_path / "run"), first, atol=0)
    # none: start over, ignoring the checkpoints (same seed: same result)
    train(load_config(None, base), resume="none")
    assert last_start().endswith("start: world 1, step 0")
    assert_params(final_params(tmp_path / "run"), first, atol=0)
    with pytest.raises(ValueError, match="no checkpoint"):
        train(load_config(None, base), resume=str(tmp_path / "elsewhere"))


@pytest.mark.multiprocess
def test_train_started_by_torchrun(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "neural_arch.cli",
        "train",
        *BASE,
        "--set",
        f"run.dir={tmp_path / 'run'}",
        "--set",
        "training.steps=6",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "on 2 process(es)" in proc.stdout
    assert (tmp_path / "run" / "logs" / "rank_1.log").exists()
