"""The GPT task: exact bits per byte, 2 processes == 1 process, config checks, baselines.

Run: ``.venv/bin/python -m pytest tests/apps/gpt/test_task.py -q``
Tiny models (d_model 16, 2 blocks, context 16) on a corpus of a dozen small text files.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from neural_arch.apps.gpt.corpus import Corpus
from neural_arch.apps.gpt.task import GPTTask
from neural_arch.distributed.checkpoint import load_checkpoint
from neural_arch.training.config import load_config
from neural_arch.training.typed_config import ConfigError
from tests.helpers.gpt_corpus import CONTEXT, VAL_FRACTION, make_corpus
from tests.helpers.multiproc import run_ranks

TINY = [
    "run.task=gpt",
    "model.d_model=16",
    "model.n_layers=2",
    "model.n_heads=2",
    "model.mlp_ratio=2",
    f"model.context={CONTEXT}",
    f"data.val_fraction={VAL_FRACTION}",
    "logging.progress=false",
    "logging.tensorboard=false",
]
# 27 windows per epoch in batches of 6: every epoch ends with 3 samples, 2 + 1 on two ranks.
EXACT = [
    "training.precision=fp64",
    "optim.name=adam",
    "optim.lr=0.003",
    "training.steps=10",
    "training.global_batch_size=6",
    "data.samples_per_epoch=27",
    "checkpoint.every_steps=0",
    "training.val_every=5",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("gpt"))


def settings(corpus: Path, *more: str) -> list[str]:
    return [*TINY, f"data.source=[{corpus.parent / 'src'}]", f"data.path={corpus}", *more]


def test_validation_windows_predict_every_byte_after_the_first_exactly_once(corpus):
    task = GPTTask(load_config(None, settings(corpus)))
    val = Corpus(corpus).val
    assert (len(val) - 1) % CONTEXT != 0, "the last window should be short for this test"
    batch = task.batch("val", torch.arange(task.val_size), torch.device("cpu"))
    y = batch["y"].reshape(-1)
    assert torch.equal(y[y >= 0], torch.from_numpy(val[1:].astype(np.int64)))
    assert torch.equal(batch["x"][:, 0], torch.from_numpy(val[: task.val_size * CONTEXT : CONTEXT].astype(np.int64)))


def test_config_mistakes_are_one_line(corpus):
    with pytest.raises(ConfigError, match="model.d_model=18 is not divisible by model.n_heads=4"):
        load_config(None, ["run.task=gpt", "model.d_model=18", "model.n_heads=4"])
    with pytest.raises(ConfigError, match="even head size"):
        load_config(None, ["run.task=gpt", "model.d_model=12", "model.n_heads=4"])
    with pytest.raises(ConfigError, match="model.positional: got 'alibi'"):
        load_config(None, ["run.task=gpt", "model.positional=alibi"])
    with pytest.raises(ConfigError, match="data.val_fraction=1.0 is out of range"):
        load_config(None, ["run.task=gpt", "data.val_fraction=1.0"])
    with pytest.raises(ConfigError, match="model.context=5000 needs 5001 bytes"):
        GPTTask(load_config(None, settings(corpus, "model.context=5000")))
    with pytest.raises(ConfigError, match="delete that directory"):
        GPTTask.data_missing(load_config(None, settings(corpus, "data.val_fraction=0.5")))


def train_worker(rank, world_size, overrides):
    from neural_arch.training.trainer import train

    final = train(load_config(None, overrides), resume="none")
    return final


@pytest.mark.multiprocess
@pytest.mark.timeout(300)  # ~25 s on an idle machine; generous for a loaded shared one
def test_two_processes_equal_one_in_float64(corpus, tmp_path):
    runs = {}
    for world in (1, 2):
        run_dir = tmp_path / f"world{world}"
        final = run_ranks(train_worker, world, args=(settings(corpus, *EXACT, f"run.dir={run_dir}"),), timeout=140)
        found = load_checkpoint(run_dir / "checkpoints")
        assert found is not None and found[0].step == 10
        runs[world] = (final[0], found[1]["model"])
    (one, one_params), (two, two_params) = runs[1], runs[2]
    assert one_params.keys() == two_params.keys()
    for name, value in one_params.items():
        np.testing.assert_allclose(two_params[name].numpy(), value.numpy(), rtol=0, atol=1e-10, err_msg=name)
    assert math.isclose(one["val/bpb"], two["val/bpb"], rel_tol=1e-12)
    assert one["val/bytes"] == two["val/bytes"] == len(Corpus(corpus).val) - 1


@pytest.mark.multiprocess
def test_trained_tiny_model_has_finite_bpb_below_uniform_and_the_baselines(corpus, tmp_path):
    from neural_arch.training.trainer import train

    cfg = load_config(
        None,
        settings(
            corpus,
            f"run.dir={tmp_path / 'run'}",
            "training.steps=40",
            "optim.name=adam",
            "optim.lr=0.01",
            "training.global_batch_size=8",
            "checkpoint.every_steps=0",
        ),
    )
    final = train(cfg, resume="none")
    assert math.isfinite(final["val/bpb"]) and final["val/bpb"] < 7.0  # 8 bits/byte = uniform over 256
    for name in ("unigram", "bigram", "gzip", "lzma"):
        assert 0 < final[f"val/baseline/{name}_bpb"] < 9, name
    assert final["val/baseline/bigram_bpb"] < final["val/baseline/unigram_bpb"]
    summary = (tmp_path / "run" / "summary.txt").read_text()
    assert "bpb" in summary and "baseline" not in summary
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"**{final['val/bpb']:.4f}**" in report and report.count("~~~~") == 6
    assert all(f"{final[f'val/baseline/{name}_bpb']:.4f}" in report for name in ("unigram", "bigram", "gzip", "lzma"))


def test_source_is_one_entry_or_a_list_and_both_name_the_same_corpus(corpus):
    one = load_config(None, [*TINY, f"data.source={corpus.parent / 'src'}", f"data.path={corpus}"])
    assert one.data.source == str(corpus.parent / "src")
    assert GPTTask.data_missing(one) is None  # the manifest (written from a list) is not stale for it
    assert load_config(None, ["run.task=gpt", "data.source=2024"]).data.source == "2024"  # a folder name
    with pytest.raises(ConfigError, match=r"data.source: expected str or a non-empty list of str or null, got \{"):
        load_config(None, ["run.task=gpt", "data.source={a: 1}"])
