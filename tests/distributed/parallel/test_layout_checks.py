"""Layout checks (one-line errors), the stage split, padding and activation checkpointing, in one process.

Run: ``pytest tests/distributed/parallel/test_layout_checks.py -q`` (seconds, no processes spawned).
"""

import dataclasses

import pytest
import torch

from neural_arch.apps.gpt.parallelize import GPTStage, heads, parallel_plan
from neural_arch.distributed.parallel import (
    ParallelLayout,
    TensorPlan,
    apply_activation_checkpointing,
    check_plan,
    data_parallel_loss,
    even_split,
    layout_from_dict,
    local_stages,
    pad_rows,
    validate,
)
from tests.helpers.gpt_runs import Setup, build_model, data, reference_run, sample_loss

BAD = [
    (
        dict(dp_shard=2),
        4,
        "dp_replicate*dp_shard*tp*pp = 1*2*1*1 = 2 but the world has 4 processes; make the product 4",
    ),
    (dict(tp=0), 1, "parallel.tp=0 must be an integer >= 1"),
    (dict(dp_shard=True), 1, "parallel.dp_shard=True must be an integer >= 1"),
    (dict(pp=2, microbatches=1), 2, "parallel.microbatches=1 is less than pp=2"),
    (dict(pp=2, microbatches=3, pp_schedule="interleaved_1f1b"), 2, "must be a multiple of pp=2; e.g. microbatches=4"),
    (dict(pp_schedule="dualpipe"), 1, "parallel.pp_schedule='dualpipe' is not one of gpipe, 1f1b"),
    (dict(param_dtype="float16"), 1, "parallel.param_dtype='float16' is not one of fp32, fp64, bf16, fp16"),
    (dict(activation_checkpointing=-1), 1, "parallel.activation_checkpointing=-1 must be an integer >= 0"),
    (dict(microbatches=4), 1, "parallel.microbatches=4 splits a pipeline step but pp=1"),
    (
        dict(sequence_parallel=True),
        1,
        "parallel.sequence_parallel=true splits the sequence over tensor-parallel "
        "ranks but tp=1; set tp >= 2 or sequence_parallel=false",
    ),
    (dict(sequence_parallel="yes", tp=2), 2, "parallel.sequence_parallel='yes' must be true or false"),
]


@pytest.mark.parametrize("values, world, message", BAD)
def test_bad_layout_is_one_line_error(values, world, message):
    with pytest.raises(ValueError) as err:
        validate(ParallelLayout(**values), world)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_good_layouts_and_sizes():
    layout = validate(ParallelLayout(dp_replicate=2, dp_shard=3, tp=2, pp=2, microbatches=4), 24)
    assert (layout.dp_size, layout.num_stages) == (6, 2)
    assert ParallelLayout(pp=2, microbatches=4, pp_schedule="zero_bubble").num_stages == 4
    with pytest.raises(ValueError, match="unknown key 'tp_size'"):
        layout_from_dict({"tp_size": 2})


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"])
def test_microbatches_left_out_is_one_per_pipeline_rank(schedule):
    """pp alone is a layout that runs: microbatches defaults to pp, which every schedule accepts."""
    for pp in (2, 3):
        layout = validate(ParallelLayout(pp=pp, pp_schedule=schedule), pp)
        assert layout.microbatches == pp
    assert ParallelLayout().microbatches == 1 and ParallelLayout() == ParallelLayout(microbatches=1)
    assert layout_from_dict({"pp": 2, "microbatches": None}).microbatches == 2


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(tp=3), "parallel.tp=3 does not divide the model's 4 attention heads; choose tp among [1, 2, 4]"),
        (dict(pp=4, microbatches=4, pp_schedule="interleaved_1f1b"), "= 8 pipeline stages but the model has 4 blocks"),
    ],
)
def test_model_that_cannot_split_is_one_line_error(values, message):
    model = build_model(Setup())
    with pytest.raises(ValueError) as err:
        check_plan(parallel_plan(), ParallelLayout(**values), model, "gpt")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert heads(model) == 4


def test_app_without_plan_cannot_ask_for_tp():
    with pytest.raises(ValueError, match="tp=2, pp=1 need a parallel plan but regression has none"):
        check_plan(None, ParallelLayout(tp=2), torch.nn.Linear(2, 2), "regression")


def test_plan_without_sequence_parallel_styles_is_one_line_error():
    plan = dataclasses.replace(parallel_plan(), tensor_plan=lambda module: TensorPlan(styles={}))
    with pytest.raises(ValueError) as err:
        check_plan(plan, ParallelLayout(tp=2, sequence_parallel=True), build_model(Setup()), "gpt")
    assert "parallel.sequence_parallel=true: gpt's tensor plan has no sequence-parallel styles" in str(err.value)
    check_plan(plan, ParallelLayout(tp=2), build_model(Setup()), "gpt")  # without it the plain plan is enough


def test_even_split_and_looped_stages():
    assert even_split(5, 2) == [range(0, 3), range(3, 5)]
    assert even_split(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(ValueError, match="cannot cut 2 blocks into 3 stages"):
        even_split(2, 3)
    assert local_stages(1, ParallelLayout(pp=2, microbatches=2, pp_schedule="interleaved_1f1b")) == [1, 3]


def test_stages_chained_equal_the_model_and_keep_its_names():
    setup = Setup(positional="learned")
    model, x = build_model(setup), data(setup)[:3, :-1]
    first, last = GPTStage(model, range(0, 1), True, False), GPTStage(model, range(1, 4), False, True)
    assert torch.equal(last(first(x)), model(x))
    names = set(dict(model.named_parameters(remove_duplicate=False)))
    assert set(dict(first.named_parameters())) | set(dict(last.named_parameters())) == names


def test_padding_rows_change_no_gradient():
    w = torch.tensor([2.0, 3.0], dtype=torch.float64, requires_grad=True)
    losses = torch.cat([w * 1.5, 7.0 * w[:1] ** 2])  # the third row is padding
    data_parallel_loss(losses, global_count=4, dp_ranks=2, valid=2).backward()
    assert w.grad.tolist() == [1.5 * 2 / 4, 1.5 * 2 / 4]
    assert pad_rows(torch.ones(0, 3), 2).shape == (2, 3) and pad_rows(torch.ones(3, 1), 2).shape == (3, 1)


def _saved_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum().backward()
    return total


def test_activation_checkpointing_saves_less_and_trains_identically():
    setup = Setup()
    x = data(setup)[:5, :-1]
    plain, checkpointed = build_model(setup), build_model(setup)
    assert apply_activation_checkpointing(list(checkpointed.blocks), 1) == [0, 1, 2, 3]
    assert _saved_bytes(checkpointed, x) < 0.5 * _saved_bytes(plain, x)
    with pytest.raises(ValueError, match="block 0 already has activation checkpointing"):
        apply_activation_checkpointing(list(checkpointed.blocks), 1)
    # every 2nd block, 10 Adam steps: parameters and losses as without checkpointing
    ref, every_2nd = reference_run(setup), reference_run(setup, checkpointing=2)
    assert every_2nd["losses"] == ref["losses"]
    assert all(torch.equal(every_2nd["params"][k], v) for k, v in ref["params"].items())


def test_sample_loss_matches_mean_cross_entropy():
    setup = Setup()
    model, w = build_model(setup), data(setup)[:4]
    logits = model(w[:, :-1])
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), w[:, 1:].reshape(-1))
    assert torch.allclose(sample_loss(logits, w[:, 1:]).mean(), expected)
