"""What a neural_arch run reports to Ray Train and when, and the one line for a lost peer, without a cluster.

Run: ``.venv/bin/python -m pytest tests/integrations/test_ray_report.py -q`` (in-process, < 1 s
after the imports). ``ray.train.report`` is replaced by a recorder: the real one needs a Ray
Train worker (tests/integrations/test_ray_train.py runs it on a local cluster).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray Train is the optional extra `neural_arch[ray]` (in the dev extra)")

from neural_arch.integrations import ray_report  # noqa: E402
from neural_arch.integrations.ray import train_loop_per_worker  # noqa: E402
from neural_arch.training.callbacks import FinishEvent, SaveEvent, StepEvent, ValidationEvent  # noqa: E402
from neural_arch.training.typed_config import ConfigError  # noqa: E402

STEPS = 12
CKPT = Path("/run/checkpoints")


@pytest.fixture
def reports(monkeypatch):
    calls: list[tuple] = []

    def record(step, metrics, saved, rank, attach):
        calls.append((step, dict(metrics), saved.name if saved else None))

    monkeypatch.setattr(ray_report, "report", record)
    return calls


def step(n: int, row=None) -> StepEvent:
    return StepEvent(step=n, steps=STEPS, rank=0, lr=0.1, metrics=row)


def test_one_report_per_checkpoint_and_per_validation(reports):
    hook = ray_report.RayReport()
    hook.on_step(step(1, {"train/loss": 2.0}))  # nothing saved or validated: no report (no barrier)
    hook.on_save(SaveEvent(step=4, steps=STEPS, rank=0, path=CKPT / "step_00000004"))
    hook.on_step(step(4))
    hook.on_validation(ValidationEvent(step=6, steps=STEPS, rank=0, metrics={"val/loss": 0.5}))
    hook.on_step(step(6, {"train/loss": 1.0, "val/loss": 0.5}))
    # checkpoint.async_save: step 8's commit arrives with step 12's, both reported, oldest first
    hook.on_save(SaveEvent(step=8, steps=STEPS, rank=0, path=CKPT / "step_00000008"))
    hook.on_save(SaveEvent(step=12, steps=STEPS, rank=0, path=CKPT / "step_00000012"))
    hook.on_validation(ValidationEvent(step=12, steps=STEPS, rank=0, metrics={"val/loss": 0.25}))
    hook.on_step(step(12, {"train/loss": 0.5, "val/loss": 0.25}))
    hook.on_finish(FinishEvent(step=12, steps=STEPS, rank=0, metrics={"val/loss": 0.25}, stopped_early=None))
    assert reports == [
        (4, {"train/loss": 2.0}, "step_00000004"),
        (6, {"train/loss": 1.0, "val/loss": 0.5}, None),
        (12, {"train/loss": 0.5, "val/loss": 0.25}, "step_00000008"),
        (12, {"train/loss": 0.5, "val/loss": 0.25}, "step_00000012"),
    ]  # nothing more at the end: step 12 was reported
    assert hook.last_saved == 12


def test_the_end_is_reported_when_its_step_was_not(reports):
    hook = ray_report.RayReport()
    hook.on_finish(FinishEvent(step=12, steps=STEPS, rank=0, metrics={"val/loss": 0.25}, stopped_early=None))
    assert reports == [(12, {"val/loss": 0.25}, None)]


def test_a_lost_peer_is_one_line_naming_who_restarts():
    lost = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:666")
    line = ray_report.explained(lost, 0, 2, "resumes from /r/checkpoints", 4)
    assert line is not None and "\n" not in line
    assert line.startswith("rank 0 of 2 stopped because another Ray Train worker of its group is gone")
    assert "Ray Train, not neural_arch, restarts the whole worker group" in line
    assert line.endswith("the new group resumes from /r/checkpoints; newest checkpoint of this worker group: step 4")
    assert ray_report.explained(ValueError("lr must be positive"), 0, 2, "resumes", None) is None


def test_a_misspelt_loop_config_key_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"unknown keys \['overides'\]; known keys: config, overrides"):
        train_loop_per_worker({"overides": ["training.steps=2"]})
