"""Validation: the last step is saved before it (a failure there loses no training); its cost.

Run: ``.venv/bin/python -m pytest tests/training/test_final_validation.py -q``
The regression MLP in float64 on 2 real ranks under the launcher (one restart allowed), 10
steps, a periodic checkpoint every 4 steps (so the one before the end is step 8). Rank 1 is
SIGKILLed as the validation after step 10 begins; the restarted job must resume from step 10
(not 8), validate, write the report, and end with the parameters and metrics of an
uninterrupted run, bitwise (same world size, same reduction order).
"""

import json

import pytest

from neural_arch.distributed.checkpoint import load_checkpoint
from tests.helpers.cli import cli
from tests.helpers.run_outputs import assert_params, final_params
from tests.helpers.trainer_runs import BASE, launch_fault

pytestmark = pytest.mark.multiprocess  # launches ranks

ARGS = [*BASE, "--set", "training.steps=10", "--set", "training.val_every=5"]


def test_a_rank_killed_in_the_final_validation_resumes_from_the_last_step(tmp_path):
    reference, run = tmp_path / "reference", tmp_path / "run"
    whole = launch_fault("none", 0, 2, *ARGS, "--set", f"run.dir={reference}")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    killed = launch_fault("val", 10, 2, *ARGS, "--set", f"run.dir={run}")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    log = (run / "logs" / "rank_0.log").read_text()
    assert "resumed from step 10" in log, log
    assert_params(final_params(run), final_params(reference), atol=0)
    got, want = (json.loads((r / "summary.json").read_text()) for r in (run, reference))
    assert got["val/loss"] == want["val/loss"]
    # The step-10 checkpoint gets its validation loss after the save; the periodic ones (4, 8) were not
    # validated (val_every=5), so best can only point at step 10.
    info, _ = load_checkpoint(run / "checkpoints" / "step_00000010")
    assert info.metric == want["val/loss"]
    assert (run / "checkpoints" / "best").resolve().name == "step_00000010"


def test_val_batches_is_the_same_subset_on_any_number_of_ranks(tmp_path):
    """training.val_batches=1: the first global batch (12) of the 25 validation samples, on 1 or 2 ranks."""
    common = [*BASE, "--set", "training.steps=3"]
    runs = {}
    for name, extra in {
        "full": [],
        "one": ["--set", "training.val_batches=1"],
        "two": ["--set", "training.val_batches=1", "--nproc-per-node", "2"],
    }.items():
        proc = cli("train", *common, "--set", f"run.dir={tmp_path / name}", *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text())
    assert runs["two"]["val/loss"] == pytest.approx(runs["one"]["val/loss"], rel=1e-12)  # float64: summation order
    assert runs["one"]["val/loss"] != pytest.approx(runs["full"]["val/loss"], rel=1e-6)  # a real subset
