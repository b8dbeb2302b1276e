"""Every layout starts from the weights one process starts from, bit for bit (step 0 is exact too).

Run: ``.venv/bin/python -m pytest tests/training/test_initial_weights.py -q``
A tiny float64 GPT is placed on FSDP x2, TP x2 and a 2-stage pipeline (real ranks over gloo);
the whole model gathered from each placement equals ``build_model()`` of one process with the
same seed, every tensor ``torch.equal``.
"""

from pathlib import Path

import pytest
import torch

from neural_arch.training.config import load_config
from neural_arch.training.registry import task_class
from neural_arch.training.run_start import build_components, claimed_run_dir
from tests.helpers.gpt_corpus import make_corpus
from tests.helpers.multiproc import run_ranks
from tests.helpers.trainer_runs import gpt_args

pytestmark = pytest.mark.multiprocess  # spawns ranks


def settings(corpus: Path, run_dir: Path, layout: list[str]) -> list[str]:
    return [*(a for a in gpt_args(corpus) if a != "--set"), f"run.dir={run_dir}", *layout]


def placed(rank: int, world: int, overrides: list[str]) -> dict:
    """Every rank: build the run's components; rank 0 returns the whole placed model at step 0."""
    cfg = load_config(None, overrides)
    with claimed_run_dir(cfg):
        components = build_components(cfg, False)
        return {k: v.numpy() for k, v in components.placement.model_state().items()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "layout",
    [
        ["parallel.dp_shard=2"],
        ["parallel.tp=2"],
        ["parallel.tp=2", "parallel.sequence_parallel=true"],
        ["parallel.pp=2"],
    ],
    ids=["fsdp2", "tp2", "tp2+sp", "pp2"],
)
def test_placed_model_equals_one_process_build(tmp_path, layout):
    corpus = make_corpus(tmp_path / "gpt")
    overrides = settings(corpus, tmp_path / "run", layout)
    cfg = load_config(None, overrides)
    task = task_class(cfg.run.task)(cfg)
    want = task.build_model().state_dict()
    got = run_ranks(placed, 2, args=(overrides,), timeout=120)[0]
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(torch.from_numpy(got[key]), value), key
