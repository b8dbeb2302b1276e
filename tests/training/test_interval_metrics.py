"""Per-interval metrics: throughput, FLOP/s and MFU against a hand count, memory, every rank's times.

Run: ``.venv/bin/python -m pytest tests/training/test_interval_metrics.py -q``
The regression MLP (8 -> 64 -> 64 -> 1, float64, global batch 32) trains 20 steps with a row
every 10 and ``logging.peak_flops=1e9``. Its FLOPs per step by hand: forward 2·B·(8·64 + 64·64
+ 64·1), the weight gradients as much again, the input gradients of the last two layers
2·B·(64·64 + 64·1) (the first layer's input needs none). Each row's MFU must equal that count /
the row's step time / the peak within 5% (the counter is exact here; the slack is for the
step time being rank 0's mean). The columns reach metrics.jsonl and TensorBoard; on 2 ranks
every rank's compute time has its own column.
"""

import pytest

from tests.helpers.cli import cli
from tests.helpers.gpt_corpus import make_corpus
from tests.helpers.run_outputs import metrics
from tests.helpers.trainer_runs import gpt_args

pytestmark = pytest.mark.multiprocess  # runs the CLI

BATCH, HIDDEN, FEATURES = 32, 64, 8
HAND_FLOPS = 2 * BATCH * (FEATURES * HIDDEN + HIDDEN * HIDDEN + HIDDEN) * 2 + 2 * BATCH * (HIDDEN * HIDDEN + HIDDEN)
ARGS = [
    "--set",
    "training.steps=20",
    "logging.every_steps=10",
    "logging.progress=false",
    f"model.hidden={HIDDEN}",
    f"training.global_batch_size={BATCH}",
    "training.precision=fp64",
    "logging.peak_flops=1e9",
]


def test_mfu_equals_the_hand_count_over_step_time_and_peak(tmp_path):
    proc = cli("train", *ARGS, "--set", f"run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [row for row in metrics(tmp_path / "run", perf=True) if "perf/mfu" in row]
    assert [row["step"] for row in rows] == [10, 20]
    for row in rows:
        assert row["perf/mfu"] == pytest.approx(HAND_FLOPS / row["perf/step_s"] / 1e9, rel=0.05), row
        assert row["perf/samples_per_s"] == pytest.approx(BATCH / row["perf/step_s"], rel=1e-9)
        assert 0 < row["perf/data_wait_s"] < row["perf/step_s"] and row["perf/peak_memory_gib"] > 0.05
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"perf/mfu", "perf/flops_per_s", "perf/samples_per_s", "perf/peak_memory_gib"} <= tags, tags


def test_two_ranks_log_each_ranks_compute_time_and_the_whole_jobs_flops(tmp_path):
    proc = cli("train", *ARGS, "--set", f"run.dir={tmp_path / 'run'}", "--nproc-per-node", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in (r for r in metrics(tmp_path / "run", perf=True) if "perf/mfu" in r):
        assert row["perf/compute_s/rank0"] > 0 and row["perf/compute_s/rank1"] > 0, row
        # each rank computes half the batch; rank 0's count, times 2 ranks, is the whole step's
        assert row["perf/flops_per_s"] * row["perf/step_s"] == pytest.approx(HAND_FLOPS, rel=1e-9), row
        assert row["perf/mfu"] == pytest.approx(row["perf/flops_per_s"] / 2e9, rel=1e-9)


@pytest.mark.long  # ~1.5 minutes: three sharded layouts and one process
@pytest.mark.timeout(300)
def test_sharded_layouts_count_the_same_flops_per_step_as_one_process(tmp_path):
    """A tiny GPT: FSDP x2 (each rank computes half the batch) and TP x2 (DTensor ops counted whole
    on each rank, so each adds half) report the FLOPs of one process's step (float64: exact)."""
    corpus = make_corpus(tmp_path / "gpt")
    per_step = {}
    layouts = {"one": [], "fsdp2": ["parallel.dp_shard=2"], "tp2": ["parallel.tp=2"]}
    for name, layout in layouts.items():
        procs = ["--nproc-per-node", "2"] if layout else []
        run = tmp_path / name
        settings = ["training.steps=4", "logging.every_steps=2", "logging.peak_flops=1e9", f"run.dir={run}"]
        proc = cli("train", *gpt_args(corpus), *settings, *layout, *procs)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = [r for r in metrics(run, perf=True) if "perf/flops_per_s" in r]
        per_step[name] = rows[-1]["perf/flops_per_s"] * rows[-1]["perf/step_s"]
    assert per_step["fsdp2"] == pytest.approx(per_step["one"], rel=1e-9), per_step
    assert per_step["tp2"] == pytest.approx(per_step["one"], rel=1e-9), per_step
