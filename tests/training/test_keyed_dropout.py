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
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from neural_arch.distributed.data_parallel.keyed_hash import keyed_draw, sample_key
from neural_arch.distributed.data_parallel.keyed_random import KeyedRandomness
from tests.helpers.gpt_corpus import make_corpus
from tests.helpers.layout_runs import EVERY_STEP, assert_same_run, losses, same_samples, train
from tests.helpers.run_outputs import assert_params, final_params
from tests.helpers.trainer_runs import FAULT, gpt_args

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


def test_each_sample_draws_from_its_own_seeded_stream():
    """A sample's row is what a generator seeded with its key draws, whatever else is in the batch."""
    keys = [sample_key(1, 2, sample, 4) for sample in (7, 8)]
    fill = lambda row, g: row.uniform_(generator=g)  # noqa: E731
    drawn = keyed_draw(keys, [2, 3, 5], torch.float64, torch.device("cpu"), fill, {})
    for key, row in zip(keys, drawn):
        assert torch.equal(
            row.flatten(), torch.empty(15, dtype=torch.float64).uniform_(generator=torch.Generator().manual_seed(key))
        )
    assert len(set(keys)) == 2 and all(0 <= k < 2**32 for k in keys)


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
def test_dropout_run_killed_and_resumed_on_another_world_size(corpus, reference, tmp_path):
    """Rank 1 of a 2-process run SIGKILLs itself after step 7 (no restart: the job fails; last
    checkpoint step 4, mid-epoch); the run continues on 1 process and ends as the uninterrupted one."""
    run = tmp_path / "run"
    launcher = [sys.executable, "-m", "neural_arch.distributed.launcher", "--nproc_per_node=2", "--max_restarts=0"]
    args = [*gpt_args(corpus), *EVERY_STEP, *DROPOUT, "--set", f"run.dir={run}", "training.steps=10"]
    killed = subprocess.run(
        [*launcher, FAULT, "kill", "7", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert killed.returncode != 0, killed.stdout[-3000:] + killed.stderr[-3000:]
    train(run, corpus, 10, *DROPOUT, procs=1)
    assert "resumed from step 4" in (run / "logs" / "rank_0.log").read_text()
    assert_params(final_params(run), final_params(reference), atol=1e-10)
    got, want = losses(run), losses(reference)  # steps 5-7 were logged twice: the rerun's rows count
    assert got.keys() == want.keys() and all(math.isclose(got[k], want[k], rel_tol=1e-12) for k in got)
    assert same_samples(run, reference)
