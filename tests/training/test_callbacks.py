"""User callbacks (training/callbacks.py): the events, their order, early stopping on 1 and 2 ranks.

Run: ``.venv/bin/python -m pytest tests/training/test_callbacks.py -q`` (about a minute on two
busy cores: in-process 1-rank runs of the tiny float64 regression MLP, two 2-rank runs over gloo,
one launcher run).

What must hold: per step the events come as on_save (synchronous save), on_validation, on_step,
then on_finish once, with the numbers the run logged; a stop asked by a callback (on every rank
alike, or on rank 1 only) ends every rank at the same step, saved, validated and summarised as an
early stop, with the weights of a 1-process run stopped at that step (float64; only the summation
order differs between 1 and 2 ranks: atol 1e-10); with ``checkpoint.async_save`` on_save sees
its checkpoint committed; a callback that raises on rank 1 only reaches the user, no hang.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neural_arch.training.callbacks import Callback, EarlyStopping, ValidationEvent
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train
from tests.helpers.multiproc import run_ranks
from tests.helpers.paths import SCRIPTS
from tests.helpers.run_outputs import assert_params, final_params, metrics

CFG = [
    "training.steps=12",
    "training.global_batch_size=12",
    "data.num_samples=101",
    "data.val_samples=25",
    "model.hidden=8",
    "training.precision=fp64",
    "training.val_every=2",
    "logging.every_steps=2",
    "logging.progress=false",
    "logging.tensorboard=false",
    "checkpoint.every_steps=3",
    "checkpoint.async_save=false",
]
"""12 steps of 12 samples (101 per epoch: uneven last batches); validation every 2 steps, a
metrics row every 2, a checkpoint every 3."""
SCRIPTED = [1.0, 0.8, 0.85, 0.81, 0.5, 0.4]
"""Validation losses EarlyStopping(patience=2) is shown: no improvement at the 3rd and 4th
validation (steps 6 and 8 with val_every=2), so it stops at step 8 of 12."""
EARLY_WHY = "val/loss did not improve by more than 0 for 2 validation(s) (best 0.8 at step 4)"


class Recorder(Callback):
    """Every event as a tuple, and whether each checkpoint was committed when on_save came."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_step(self, event):
        self.events.append(("step", event.step, event.metrics and dict(event.metrics), event.lr, event.rank_loss))

    def on_validation(self, event):
        self.events.append(("validation", event.step, dict(event.metrics)))

    def on_save(self, event):
        committed = (event.path / "manifest.json").is_file() and not list(event.path.parent.glob(".tmp-*"))
        self.events.append(("save", event.step, event.path, committed))

    def on_finish(self, event):
        self.events.append(("finish", event.step, event.steps, dict(event.metrics), event.stopped_early))


class Scripted(EarlyStopping):
    """EarlyStopping shown ``SCRIPTED`` as its metric instead of the real validation loss."""

    def __init__(self) -> None:
        super().__init__("val/loss", patience=2)
        self.shown = list(SCRIPTED)

    def on_validation(self, event: ValidationEvent) -> None:
        super().on_validation(dataclasses.replace(event, metrics={"val/loss": self.shown.pop(0)}))


class StopOn(Callback):
    """Asks to stop after ``step`` on ``rank`` (None: every rank)."""

    def __init__(self, step: int, rank: Any = None) -> None:
        self.step, self.rank = step, rank

    def on_step(self, event):
        if event.step == self.step and self.rank in (None, event.rank):
            event.request_stop(f"asked at step {self.step}")


def config(run: Path, *more: str):
    return load_config(None, [*CFG, f"run.dir={run}", *more])


def test_events_come_in_order_with_the_run_s_numbers(tmp_path):
    run, recorder, plain = tmp_path / "run", Recorder(), []
    final = train(config(run, "training.steps=6"), callbacks=[recorder], on_step=plain.append)
    kinds = [(e[0], e[1]) for e in recorder.events]
    assert kinds == [
        ("step", 1),
        ("validation", 2),
        ("step", 2),
        ("save", 3),
        ("step", 3),
        ("validation", 4),
        ("step", 4),
        ("step", 5),
        ("save", 6),
        ("validation", 6),
        ("step", 6),
        ("finish", 6),
    ]
    assert plain == [1, 2, 3, 4, 5, 6]  # the plain on_step function, beside the callbacks
    rows = {row.pop("step"): row for row in metrics(run)}
    for kind, step, *rest in recorder.events:
        if kind == "step":
            row, lr, rank_loss = rest
            assert (row is None) == (step % 2 == 1)
            assert row is None or {k: v for k, v in row.items() if not k.startswith("perf/")} == rows[step]
            assert row is None or row["lr"] == lr
            assert rank_loss == rank_loss and rank_loss > 0  # this rank's loss of the step: a number
        elif kind == "validation":
            assert rest[0] == {k: v for k, v in rows[step].items() if k.startswith("val/")}
        elif kind == "save":
            assert rest == [run / "checkpoints" / f"step_{step:08d}", True]
    assert recorder.events[-1] == ("finish", 6, 6, final, None)


def test_early_stopping_stops_at_the_right_step_saved_validated_and_summarised(tmp_path):
    run, recorder = tmp_path / "run", Recorder()
    final = train(config(run), callbacks=[Scripted(), recorder])
    why = EARLY_WHY
    assert recorder.events[-1] == ("finish", 8, 12, final, why)
    assert ("save", 8, run / "checkpoints" / "step_00000008", True) in recorder.events  # not a checkpoint step
    assert max(e[1] for e in recorder.events if e[0] == "step") == 8
    assert (run / "summary.txt").read_text().startswith(f"stopped early at step 8 of 12: {why}\n")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_early_at_step"] == 8 and summary["val/loss"] == final["val/loss"]
    assert metrics(run)[-1]["step"] == 8 and (run / "loss.png").is_file()


def test_a_callback_s_error_is_the_user_s_error(tmp_path):
    class Broken(Callback):
        def on_validation(self, event):
            raise ZeroDivisionError(f"user code at step {event.step}")

    with pytest.raises(ZeroDivisionError, match="user code at step 2"):
        train(config(tmp_path / "run"), callbacks=[Broken()])


def _ranks_stop(rank: int, world_size: int, run: str, how: str) -> dict[str, Any]:
    recorder = Recorder()
    stopper = Scripted() if how == "early" else StopOn(5, rank=1)
    train(config(Path(run), "checkpoint.async_save=true"), callbacks=[stopper, recorder])
    return {"events": recorder.events}


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["early", "rank1"])
def test_two_ranks_stop_at_the_same_step_as_one_process_stopped_there(tmp_path, how):
    """``early``: EarlyStopping on every rank (validation metrics are the same everywhere);
    ``rank1``: only rank 1 asks, after step 5 (no validation or save there: the ranks agree
    within the check interval, at a step the test does not choose). Checkpoints async."""
    run = tmp_path / "two"
    zero, one = (r["events"] for r in run_ranks(_ranks_stop, 2, args=(str(run), how), timeout=180))
    finish = zero[-1]
    step, why = finish[1], finish[4]
    assert one[-1][:2] == (finish[0], step) and one[-1][3:] == finish[3:]  # same step, metrics, reason
    assert step == 8 if how == "early" else 5 <= step < 12
    assert why == (EARLY_WHY if how == "early" else "rank 1: asked at step 5")
    for events in (zero, one):  # every checkpoint reported once, committed, on both ranks
        saves = [e for e in events if e[0] == "save"]
        assert [e[1] for e in saves] == sorted({*(s for s in (3, 6, 9) if s <= step), step})
        assert all(committed for *_, committed in saves)
    assert (run / "summary.txt").read_text().startswith(f"stopped early at step {step} of 12: {why}")
    reference = tmp_path / "one"
    one_process = train(config(reference), callbacks=[StopOn(step)])
    assert json.loads((reference / "summary.json").read_text())["stopped_early_at_step"] == step
    assert_params(final_params(run), final_params(reference), atol=1e-10)
    assert finish[3] == pytest.approx(one_process, rel=1e-10)


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_a_callback_raising_on_rank_1_only_reaches_the_user(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "neural_arch.distributed.launcher",
        "--nproc_per_node=2",
        "--max_restarts=0",
        str(SCRIPTS / "train_callback_error.py"),
        *[a for kv in CFG for a in ("--set", kv)],
        "--set",
        f"run.dir={tmp_path / 'run'}",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=200, env=env)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "LookupError: the user's callback failed at step 3 on rank 1" in out, out
