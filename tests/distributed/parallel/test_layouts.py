"""Every parallel layout trains the tiny GPT exactly as one process does (real gloo ranks).

Run: ``pytest tests/distributed/parallel/test_layouts.py -q`` (about 2-3 minutes on 2 cores).

Each run trains 10 Adam steps in float64 on global batches of 5 (shares of 3 and 2 over
two data-parallel ranks, and a last batch of one sample, so one share is empty) and
compares, against a one-process run in this test process, the loss at every step and all
parameters after the run (gathered with ``DTensor.full_tensor()``) within 1e-10. It also
checks that each layout really split the model (and, with sequence parallelism, the
sequence seen by the norms). Several layouts share one process start
(the start costs more than the training here).
"""

import pytest

from neural_arch.distributed.parallel import ParallelLayout
from tests.helpers.gpt_runs import Run, Setup, compare, reference_run, runs_worker
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess

TOLERANCE = 1e-10
ROTARY, LEARNED = Setup(), Setup(positional="learned")
ODD = Setup(context=7)  # a sequence that 2 tensor-parallel ranks shard unevenly (4 + 3 tokens)
QKV = "blocks.0.attn.qkv.weight"


@pytest.fixture(scope="module")
def references() -> dict:
    return {setup: reference_run(setup) for setup in (ROTARY, LEARNED, ODD)}


def _train(references: dict, runs: dict[str, Run], world: int) -> dict[str, list[dict]]:
    """Results per run name (each a list over ranks); asserts every non-naive run is exact."""
    per_rank = run_ranks(runs_worker, world, args=(list(runs.values()),), timeout=560)
    results = {name: [rank[i] for rank in per_rank] for i, name in enumerate(runs)}
    for name, run in runs.items():
        params, losses = compare(references[run.setup], results[name])
        print(f"{name}: max |param diff| {params:.2e}, max |loss diff| {losses:.2e}")
        if run.plain_qkv:  # the wrong plan must be seen
            assert losses > 1e-3 and params > 1e-3, f"{name}: a naive q/k/v split went unnoticed"
        elif run.layout.param_dtype == "fp32":  # float32 compute: close, and visibly not float64
            assert 1e-9 < losses < 1e-5 and params < 1e-4, f"{name}: params {params:.2e}, losses {losses:.2e}"
        else:
            assert params <= TOLERANCE and losses <= TOLERANCE, f"{name}: params {params:.2e}, losses {losses:.2e}"
    return results


@pytest.mark.timeout(600)
def test_sharded_and_tensor_parallel_on_two_ranks(references):
    runs = {
        "fsdp2": Run(ROTARY, ParallelLayout(dp_shard=2)),
        "fsdp2_checkpointing": Run(
            ROTARY, ParallelLayout(dp_shard=2, activation_checkpointing=1, reshard_after_forward=False)
        ),
        "fsdp2_fp32_compute": Run(ROTARY, ParallelLayout(dp_shard=2, param_dtype="fp32", reduce_dtype="fp64")),
        "tp2": Run(ROTARY, ParallelLayout(tp=2)),
        "tp2_sp": Run(ODD, ParallelLayout(tp=2, sequence_parallel=True)),
        # A plain ColwiseParallel on [q; k; v] gives rank 0 all of q and half of k.
        "tp2_naive_qkv": Run(ROTARY, ParallelLayout(tp=2), plain_qkv=True),
    }
    results = _train(references, runs, 2)
    half = references[ROTARY]["params"][QKV].numel() // 2
    for name in ("fsdp2", "fsdp2_checkpointing", "tp2"):
        assert [r["held"][QKV] for r in results[name]] == [half, half], name
    # sequence parallel: each rank's norms ran on its uneven share of the 7 tokens, not on all
    assert [r["norm_tokens"] for r in results["tp2_sp"]] == [[4], [3]]
    assert [r["norm_tokens"] for r in results["tp2"]] == [[8], [8]]


@pytest.mark.timeout(600)
def test_pipeline_schedules_on_two_ranks(references):
    runs = {
        "pp2_gpipe": Run(LEARNED, ParallelLayout(pp=2, microbatches=2, pp_schedule="gpipe")),
        "pp2_1f1b": Run(LEARNED, ParallelLayout(pp=2, microbatches=3, pp_schedule="1f1b")),
        "pp2_interleaved_1f1b": Run(ROTARY, ParallelLayout(pp=2, microbatches=2, pp_schedule="interleaved_1f1b")),
        "pp2_zero_bubble": Run(ROTARY, ParallelLayout(pp=2, microbatches=4, pp_schedule="zero_bubble")),
    }
    for name, ranks in _train(references, runs, 2).items():
        # the embedding only on the first stage's rank, the (tied) head only on the last's
        assert "embed.weight" in ranks[0]["held"] and "embed.weight" not in ranks[1]["held"], name
        assert "head.weight" in ranks[1]["held"] and "head.weight" not in ranks[0]["held"], name
        assert "blocks.0.ln1.weight" not in ranks[1]["held"], name


@pytest.mark.timeout(600)
def test_two_dimensional_layouts_on_four_ranks(references):
    runs = {
        "hsdp2x2": Run(ROTARY, ParallelLayout(dp_replicate=2, dp_shard=2)),
        "fsdp2_tp2": Run(ROTARY, ParallelLayout(dp_shard=2, tp=2)),
        "pp2_dp2": Run(ROTARY, ParallelLayout(dp_shard=2, pp=2, microbatches=2)),
        "fsdp2_tp2_sp": Run(ROTARY, ParallelLayout(dp_shard=2, tp=2, sequence_parallel=True)),
        # one block per stage: whole tensors cross the stage boundaries, cut and gathered in each block
        "pp2_tp2_sp": Run(
            ROTARY, ParallelLayout(pp=2, tp=2, microbatches=2, pp_schedule="interleaved_1f1b", sequence_parallel=True)
        ),
    }
    results = _train(references, runs, 4)
    full = references[ROTARY]["params"][QKV].numel()
    assert [r["held"][QKV] for r in results["hsdp2x2"]] == [full // 2] * 4
    assert [r["held"][QKV] for r in results["fsdp2_tp2"]] == [full // 4] * 4
    assert [r["held"][QKV] for r in results["pp2_dp2"] if QKV in r["held"]] == [full // 2] * 2
    assert [r["held"][QKV] for r in results["fsdp2_tp2_sp"]] == [full // 4] * 4
    for name in ("fsdp2_tp2_sp", "pp2_tp2_sp"):
        assert [r["norm_tokens"] for r in results[name]] == [[4]] * 4, name
