"""A compressed ``neural-arch train`` run killed mid-run and restarted ends bitwise equal to the same
compressed run uninterrupted; the ``ddp:`` section's bad values are one-line errors.

Run: ``.venv/bin/python -m pytest tests/training/test_compression_resume.py``

2 gloo ranks under the launcher, float64, the regression MLP (8 -> 32 -> 32 -> 1). Rank 1 is
SIGKILLed after step 7 (tests/scripts/train_fault.py); the group restarts from the step-4
checkpoint. PowerSGD (rank 1, warm-up 2 steps) is compressing by then, and a 512-byte bucket size
gives several DDP buckets, so the restart's first backward (one DDP bucket) must be split into
the saved ones. Tolerance: none (torch.equal on every parameter and every logged loss).
"""

import pytest
import torch

from neural_arch.distributed.checkpoint import load_checkpoint
from neural_arch.training.config import load_config
from neural_arch.training.typed_config import ConfigError
from tests.helpers.cli import cli
from tests.helpers.run_outputs import assert_params, final_params, metrics
from tests.helpers.trainer_runs import BASE, launch_fault

STEPS = ["--set", "training.steps=20", "--set", "schedule.decay=constant"]
COMPRESSED = {
    "powersgd": [
        "--set",
        "ddp.compression=powersgd",
        "--set",
        "ddp.powersgd_rank=1",
        "--set",
        "ddp.powersgd_warmup_steps=2",
        "--set",
        "ddp.bucket_mb=0.0005",
    ],
}
# bf16/fp16 keep no state between steps: their resume is the uncompressed one (test_trainer.py),
# and that they differ from the exact run is checked on gradients in test_compression.py.


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", list(COMPRESSED))
def test_killed_compressed_run_resumes_bitwise(tmp_path, name):
    args = [*BASE, *STEPS, *COMPRESSED[name]]
    ref, run = tmp_path / "ref", tmp_path / "run"
    whole = launch_fault("none", 0, 2, *args, "--set", f"run.dir={ref}")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    killed = launch_fault("kill", 7, 2, *args, "--set", f"run.dir={run}")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert "resumed from step 4" in (run / "logs" / "rank_0.log").read_text()
    assert_params(final_params(run), final_params(ref), atol=0)
    # The last row (step 20: the interval's exact mean loss and the final validation) is the same; the row
    # at step 10 is not compared: after a restart its interval begins at the resumed step, not at step 0.
    assert metrics(run)[-1] == metrics(ref)[-1]
    if name == "powersgd":
        state = load_checkpoint(run / "checkpoints")[1]["compression"]  # loaded with weights_only=True
        assert state["iter"] == 20 and len(state["error"]) == 2 and len(state["layout"]) >= 2
        assert not torch.equal(state["error"][0][0], state["error"][1][0])  # each rank's own error feedback
        # On 3 ranks the error feedback of 2 cannot continue: restarted, said in one line, run completes.
        more = cli("train", *args, "--set", f"run.dir={run}", "--set", "training.steps=24", "--nproc-per-node", "3")
        assert more.returncode == 0, more.stdout + more.stderr
        assert "PowerSGD state does not fit this run (world_size 2 -> 3)" in more.stdout, more.stdout


@pytest.mark.parametrize(
    "override, message",
    [
        ("ddp.compression=zip", "ddp.compression: got 'zip'"),
        ("ddp.powersgd_rank=0", "ddp.powersgd_rank=0 is out of range"),
        ("ddp.powersgd_warmup_steps=1", "ddp.powersgd_warmup_steps=1 is out of range: must be >= 2"),
        ("ddp.bucket_mb=-1", "ddp.bucket_mb=-1.0 is out of range"),
        ("ddp.compresion=bf16", "did you mean 'ddp.compression'"),
    ],
)
def test_bad_ddp_values(override, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_config(None, [override])
    assert "\n" not in str(info.value)


@pytest.mark.multiprocess
def test_compression_with_a_parallel_layout_exits_2():
    proc = cli(
        "train",
        "--set",
        "ddp.compression=powersgd",
        "--set",
        "parallel.dp_shard=2",
        "--nproc-per-node",
        "2",
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "ddp.compression=powersgd with a parallel: layout" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
