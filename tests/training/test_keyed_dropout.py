"""Dropout keyed per sample: the built-in GPT with ``model.dropout=0.1`` trains exactly as one process.

Run: ``.venv/bin/python -m pytest tests/training/test_keyed_dropout.py -q``
The tiny float64 GPT of tests/helpers/layout_runs.py (27 windows per epoch in global batches
of 6, uneven last shares) with dropout 0.1 in the embedding, attention (inside
``scaled_dot_product_attention``), residual and MLP paths. Before keying, each rank drew its
masks from its own stream and 2 processes gave another loss than 1. Tolerances: parameters
within 1e-10, logged losses and validation bits per byte within 1e-12 relative (float64: only
summation order differs); the keyed values themselves are integer hashes, equal bit for bit.
"""

import io
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from neural_arch.distributed.data_parallel.keyed_hash import keyed_uniform, sample_key
from neural_arch.distributed.data_parallel.keyed_random import KeyedRandomness
from tests.helpers.gpt_corpus import make_corpus
from tests.helpers.layout_runs import assert_same_run, same_samples, train
from tests.helpers.run_outputs import assert_params, final_params

DROPOUT = ["--set", "model.dropout=0.1"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("gpt"))


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ref") / "run"
    train(run, corpus, 10, *DROPOUT)
    return run


def _draws(session: KeyedRandomness, ids: list[int], x: torch.Tensor, q: torch.Tensor) -> list[torch.Tensor]:
    with session.forward(step=3, sample_ids=ids):
        return [
            F.dropout(x, 0.3, True),
            F.dropout2d(x.unsqueeze(-1), 0.5, True),
            F.scaled_dot_product_attention(q, q, q, dropout_p=0.2, is_causal=True),
            F.dropout(x.reshape(-1, x.shape[-1]), 0.3, True),  # [n * k, d]: sample-major rows
            torch.rand_like(x),
            torch.randn_like(x),
            torch.empty_like(x).normal_(),
        ]


def test_a_sample_draws_the_same_values_in_any_split():
    session = KeyedRandomness(seed=5)
    x = torch.randn(4, 5, 6, dtype=torch.float64)
    q = torch.randn(4, 2, 5, 8, dtype=torch.float64)
    whole = _draws(session, [10, 11, 12, 13], x, q)
    halves = zip(_draws(session, [10, 11], x[:2], q[:2]), _draws(session, [12, 13], x[2:], q[2:]))
    for a, (b, c) in zip(whole, halves):
        assert torch.equal(a, torch.cat([b, c]))
    dropped = (whole[0] == 0).double().mean().item()
    assert 0.2 < dropped < 0.4  # about p = 0.3 of 120 values
    assert not torch.equal(_draws(KeyedRandomness(seed=6), [10, 11, 12, 13], x, q)[0], whole[0])


def test_hash_wraps_as_64_bit_integers():
    """The tensor hash equals the same arithmetic on Python integers modulo 2**64 (so any
    machine, CPU or GPU, draws the same values)."""
    from neural_arch.distributed.data_parallel.keyed_hash import _GAMMA, _mix_int, keyed_below

    key = sample_key(1, 2, 3, 4)
    drawn = keyed_uniform([key], [1, 3], torch.float64, torch.device("cpu")).tolist()[0]
    assert drawn == [(_mix_int(key + j * _GAMMA) >> 11) * 2.0**-53 for j in (1, 2, 3)]
    assert keyed_uniform([key], [1, 4096], torch.float32, torch.device("cpu")).max() < 1
    wide = keyed_uniform([key, key + 1], [2, 4096], torch.float64, torch.device("cpu"))
    for p in (0.1, 0.5, 1 / 3):  # the integer comparison is the float one
        assert torch.equal(keyed_below([key, key + 1], [2, 4096], p, torch.device("cpu")), wide < p)


def test_activation_checkpointing_recomputes_the_same_masks():
    from neural_arch.distributed.parallel import apply_activation_checkpointing

    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Dropout(0.4)) for _ in range(2)
    ).double()
    x = torch.randn(3, 6, dtype=torch.float64)

    def grads() -> list[torch.Tensor]:
        blocks.zero_grad()
        with KeyedRandomness(seed=1).forward(step=1, sample_ids=[0, 1, 2]):
            y = x
            for block in blocks:
                y = block(y)
        y.square().sum().backward()
        return [p.grad.clone() for p in blocks.parameters()]

    plain = grads()
    apply_activation_checkpointing(blocks, every=1)
    for a, b in zip(grads(), plain):
        assert torch.equal(a, b)


def test_an_unkeyable_random_op_is_named_once():
    out = io.StringIO()
    model = torch.nn.Sequential(torch.nn.Linear(3, 3))
    session = KeyedRandomness(seed=0, model=model, stream=out)
    for _ in range(2):
        with session.forward(step=1, sample_ids=[0, 1]):
            model(torch.randn(2, 3))
            torch.randperm(5)  # not elementwise: no per-sample key
            torch.rand(3, 2)  # no batch dimension first
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all("cannot be keyed per sample" in line for line in lines)
    assert "randperm" in lines[0] and "rand.default" in lines[1]


@pytest.mark.multiprocess
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "layout",
    [
        ["training.grad_accum_steps=3"],  # DDP x2, each share in 3 micro-batches
        ["parallel.dp_shard=2"],  # FSDP2
        ["parallel.dp_shard=2", "parallel.activation_checkpointing=1"],  # masks replayed in recomputation
    ],
    ids=["ddp2+accum3", "fsdp2", "fsdp2+checkpointing"],
)
def test_dropout_run_equals_one_process(corpus, reference, tmp_path, layout):
    train(tmp_path / "run", corpus, 10, *DROPOUT, "--set", *layout, procs=2)
    assert_same_run(tmp_path / "run", reference)
    assert same_samples(tmp_path / "run", reference)


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_dropout_run_resumed_on_another_world_size(corpus, reference, tmp_path):
    """Stopped at step 5 (mid-epoch 1) on 2 processes, continued on 1: as the uninterrupted run."""
    run = tmp_path / "run"
    train(run, corpus, 5, *DROPOUT, procs=2)
    train(run, corpus, 10, *DROPOUT, procs=1)
    assert "resumed from step 5" in (run / "logs" / "rank_0.log").read_text()
    assert_params(final_params(run), final_params(reference), atol=1e-10)
    assert math.isfinite(final_params(run)[next(iter(final_params(run)))].sum().item())
