"""A plan read off a model's block list: which lists count, tied parameters, precedence, refusals.

Run: ``.venv/bin/python -m pytest tests/distributed/parallel/test_inferred_plan.py -q``
Inference only looks at the module tree (no process group); the last test runs the trainer.
"""

import pytest
import torch
from torch import nn

from neural_arch.apps.gpt.model import GPT
from neural_arch.apps.gpt.parallelize import parallel_plan
from neural_arch.apps.regression.model import MLP
from neural_arch.distributed.parallel import ParallelLayout, block_lists, infer_plan, resolve_plan, tied_parameters
from tests.helpers.cli import cli
from tests.helpers.paths import REPO

CHECKPOINTING = ParallelLayout(activation_checkpointing=1)


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)


class MoEBlock(nn.Module):
    """A block that holds a list of its own (experts): not a second candidate."""

    def __init__(self) -> None:
        super().__init__()
        self.experts = nn.ModuleList(Expert() for _ in range(3))


class MoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MoEBlock() for _ in range(2))
        self.heads = nn.ModuleList(nn.Linear(4, 1) for _ in range(2))  # leaf modules: not blocks


def test_the_one_list_of_identical_blocks_is_found_with_the_tied_head():
    model = GPT(d_model=8, n_layers=3, n_heads=2, context=8)
    assert block_lists(model) == ["blocks"]
    plan = infer_plan(model)
    assert plan is not None and plan.blocks(model) == list(model.blocks)
    assert plan.tied == (("embed.weight", "head.weight"),) == tied_parameters(model)


def test_lists_inside_a_block_and_lists_of_layers_do_not_count():
    model = MoE()
    assert block_lists(model) == ["layers"]
    assert infer_plan(model).blocks(model) == list(model.layers)
    assert tied_parameters(model) == ()


def test_a_sequential_model_of_blocks_is_its_own_block_list():
    model = nn.Sequential(MoEBlock(), MoEBlock())
    assert block_lists(model) == [""]
    assert infer_plan(model).blocks(model) == list(model)


def test_the_apps_own_plan_takes_precedence():
    model = GPT(d_model=8, n_layers=2, n_heads=2, context=8)
    plan = parallel_plan()
    assert resolve_plan(plan, model, CHECKPOINTING) is plan


def test_no_block_list_keeps_whole_model_fsdp_and_refuses_checkpointing_in_one_line():
    mlp = MLP()  # a Sequential of Linear and Tanh: not identical blocks
    assert block_lists(mlp) == [] and resolve_plan(None, mlp, ParallelLayout(dp_shard=2)) is None
    with pytest.raises(ValueError) as refused:
        resolve_plan(None, mlp, CHECKPOINTING)
    line = str(refused.value)
    assert "\n" not in line
    assert "MLP has no ModuleList or Sequential of identical blocks" in line
    assert "ParallelPlan(blocks=lambda model: list(model.NAME))" in line and "or set it to 0" in line


def test_several_block_lists_are_ambiguous_and_named():
    model = nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=8, batch_first=True)
    assert block_lists(model) == ["encoder.layers", "decoder.layers"]
    assert infer_plan(model) is None
    with pytest.raises(ValueError, match=r"several block lists \(encoder.layers, decoder.layers\)"):
        resolve_plan(None, model, CHECKPOINTING)


def test_a_hugging_face_gpt2_from_a_config():
    transformers = pytest.importorskip("transformers", reason="transformers (the dev extra) is not installed")
    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=8)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    assert block_lists(model) == ["transformer.h"]
    assert infer_plan(model).blocks(model) == list(model.transformer.h)
    assert tied_parameters(model) == (("transformer.wte.weight", "lm_head.weight"),)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_the_trainer_refuses_checkpointing_of_a_model_without_blocks_in_one_line(tmp_path):
    """The regression MLP with ``parallel.activation_checkpointing=1``: one line, exit 2, no run."""
    proc = cli(
        "train",
        "--config",
        str(REPO / "configs" / "tiny.yaml"),
        "--set",
        f"run.dir={tmp_path / 'run'}",
        "parallel.activation_checkpointing=1",
        timeout=100,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "MLP has no ModuleList or Sequential of identical blocks; give the task a plan" in proc.stderr
