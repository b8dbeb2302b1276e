"""Every parallel layout trains the tiny GPT exactly as one process does (real gloo ranks).

Run: ``pytest tests/distributed/parallel/test_layouts.py -q`` (about 4 minutes on 2 cores).

Each test trains 10 Adam steps in float64 on global batches of 5 (shares of 3 and 2 over
two data-parallel ranks, and a last batch of one sample, so one share is empty) and
compares, against a one-process run in this test process, the loss at every step and all
parameters after the run (gathered with ``DTensor.full_tensor()``) within 1e-10. It also
checks each layout really split the model (ranks hold fewer numbers than the model has).
"""

import pytest

from neural_arch.distributed.parallel import ParallelLayout
from tests.distributed.parallel.gpt_runs import Setup, compare, layout_worker, reference_run
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess

TOLERANCE = 1e-10
ROTARY, LEARNED = Setup(), Setup(positional="learned")


@pytest.fixture(scope="module")
def references() -> dict:
    return {setup: reference_run(setup) for setup in (ROTARY, LEARNED)}


def _check(references: dict, setup: Setup, layout: ParallelLayout, world: int) -> list[dict]:
    results = run_ranks(layout_worker, world, args=(setup, layout), timeout=280)
    params, losses = compare(references[setup], results)
    print(f"{layout}: max |param diff| {params:.2e}, max |loss diff| {losses:.2e}")
    assert params <= TOLERANCE and losses <= TOLERANCE
    return results


def _held(result: dict, name: str) -> int:
    return result["held"][name]


TWO_RANKS = {
    "fsdp2": (ROTARY, ParallelLayout(dp_shard=2)),
    "fsdp2_checkpointing": (ROTARY, ParallelLayout(dp_shard=2, activation_checkpointing=1, reshard_after_forward=False)),
    "tp2": (ROTARY, ParallelLayout(tp=2)),
    "pp2_gpipe": (ROTARY, ParallelLayout(pp=2, microbatches=2, pp_schedule="gpipe")),
    "pp2_1f1b": (LEARNED, ParallelLayout(pp=2, microbatches=3, pp_schedule="1f1b")),
    "pp2_interleaved": (ROTARY, ParallelLayout(pp=2, microbatches=2, pp_schedule="interleaved_1f1b")),
    "pp2_zero_bubble": (ROTARY, ParallelLayout(pp=2, microbatches=2, pp_schedule="zero_bubble")),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(TWO_RANKS))
def test_two_rank_layout_equals_one_process(references, name):
    setup, layout = TWO_RANKS[name]
    results = _check(references, setup, layout, 2)
    full = references[setup]["params"]["blocks.0.attn.qkv.weight"].numel()
    if layout.dp_shard > 1 or layout.tp > 1:  # each rank holds half of each matrix
        assert [_held(r, "blocks.0.attn.qkv.weight") for r in results] == [full // 2] * 2
    if layout.pp > 1:  # the embedding on the first stage's rank only, the head on the last's
        assert "embed.weight" in results[0]["held"] and "embed.weight" not in results[1]["held"]
        assert "head.weight" in results[1]["held"] and "blocks.0.ln1.weight" not in results[1]["held"]


FOUR_RANKS = {
    "hsdp2x2": ParallelLayout(dp_replicate=2, dp_shard=2),
    "fsdp2_tp2": ParallelLayout(dp_shard=2, tp=2),
    "pp2_dp2": ParallelLayout(dp_shard=2, pp=2, microbatches=2),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(FOUR_RANKS))
def test_four_rank_layout_equals_one_process(references, name):
    layout = FOUR_RANKS[name]
    results = _check(references, ROTARY, layout, 4)
    full = references[ROTARY]["params"]["blocks.0.attn.qkv.weight"].numel()
    shards = layout.dp_shard * layout.tp
    assert all(_held(r, "blocks.0.attn.qkv.weight") == full // shards for r in results if "blocks.0.attn.qkv.weight" in r["held"])


@pytest.mark.timeout(300)
def test_naive_column_split_of_fused_qkv_is_caught(references):
    """A plain ColwiseParallel on [q; k; v] gives rank 0 all of q and half of k: the
    comparison must see it (and FusedColwiseParallel, above, must be what makes TP exact)."""
    results = run_ranks(layout_worker, 2, args=(ROTARY, ParallelLayout(tp=2), True), timeout=280)
    params, losses = compare(references[ROTARY], results)
    assert losses > 1e-3 and params > 1e-3
