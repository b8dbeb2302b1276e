"""``run.init_from``: a fresh run starts from another run's weights, whatever layout saved them.

Run: ``.venv/bin/python -m pytest tests/training/test_init_from.py -q``
A tiny float64 GPT trains 5 steps on FSDP x2 (so its checkpoint is sharded). A new run then
builds its model on 1 process and on TP x2 from that checkpoint (real ranks over gloo): the
whole model it starts from equals the saved one bitwise, and its optimizer is empty (no step
taken). A run of another model shape, or of another app, is refused in one line (exit 2)
naming the first key that does not fit; fine-tuning then trains from those weights.
"""

from pathlib import Path

import pytest
import torch

from neural_arch.training.config import load_config
from neural_arch.training.run_start import build_components, claimed_run_dir, weights_from
from tests.helpers.cli import cli
from tests.helpers.gpt_corpus import make_corpus
from tests.helpers.layout_runs import train
from tests.helpers.multiproc import run_ranks
from tests.helpers.run_outputs import final_params, metrics
from tests.helpers.trainer_runs import gpt_args

pytestmark = pytest.mark.multiprocess  # launches ranks


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[Path, Path]:
    """(corpus, run dir) of 5 steps on FSDP x2: a sharded checkpoint at step 5."""
    corpus = make_corpus(tmp_path_factory.mktemp("gpt"))
    run = tmp_path_factory.mktemp("source") / "run"
    train(run, corpus, 5, "--set", "parallel.dp_shard=2", procs=2)
    assert (run / "checkpoints" / "step_00000005" / "shards").is_dir()
    return corpus, run


def start_from(rank: int, world: int, corpus: Path, source: Path, run_dir: Path, layout: list[str]) -> dict:
    """Every rank: build a fresh run with run.init_from; rank 0 returns its whole starting model."""
    overrides = [a for a in gpt_args(corpus) if a != "--set"]
    cfg = load_config(None, [*overrides, f"run.dir={run_dir}", f"run.init_from={source}", *layout])
    with claimed_run_dir(cfg):
        components = build_components(cfg, False)
        weights_from(components, str(source))
        state = {k: v.numpy() for k, v in components.placement.model_state().items()}
        return {"model": state, "optimizer_steps": len(components.optimizer.state), "step": components.step}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("world, layout", [(1, []), (2, ["parallel.tp=2"])], ids=["one-process", "tp2"])
def test_starts_with_exactly_the_saved_weights(source, tmp_path, world, layout):
    corpus, run = source
    got = run_ranks(start_from, world, args=(corpus, run, tmp_path / "new", layout), timeout=120)[0]
    want = final_params(run)
    assert got["model"].keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(torch.from_numpy(got["model"][key]), value), key
    assert got["optimizer_steps"] == 0 and got["step"] == 0


@pytest.mark.parametrize(
    "change, words",
    [
        (["model.d_model=32"], "has shape"),
        (["model.n_layers=3"], "the checkpoint has no 'blocks.2."),
        (["model.n_layers=1"], "the checkpoint holds 'blocks.1."),
    ],
)
def test_a_model_that_does_not_fit_is_one_line_and_exit_2(source, tmp_path, change, words):
    corpus, run = source
    proc = cli("train", *gpt_args(corpus), "--set", f"run.dir={tmp_path / 'new'}", f"run.init_from={run}", *change)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_fine_tuning_trains_on_from_the_weights(source, tmp_path):
    """Its own step count from 1 (step 0 is the source's weights), its own checkpoints."""
    corpus, run = source
    new = tmp_path / "new"
    args = [*gpt_args(corpus), "--set", f"run.dir={new}", f"run.init_from={run}"]
    args += ["training.steps=3", "logging.every_steps=1"]
    proc = cli("train", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"initialised the model from {run} (saved at its step 5)" in proc.stdout
    assert [row["step"] for row in metrics(new) if "train/loss" in row][0] == 1
    assert sorted(p.name for p in (new / "checkpoints").glob("step_*")) == ["step_00000003"]
