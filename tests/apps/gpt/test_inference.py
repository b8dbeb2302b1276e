"""A trained GPT checkpoint through ``neural-arch generate`` and ``neural-arch export``.

Run: ``.venv/bin/python -m pytest tests/apps/gpt/test_inference.py -q``
One tiny model (d_model 16, 2 blocks, context 16) is trained for 30 steps in this process;
every test reads its checkpoint as a user would, through the command line.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from neural_arch.apps.gpt.inference import model_from_state
from neural_arch.apps.gpt.model import generate
from neural_arch.cli.checkpoints import read_checkpoint
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train
from tests.helpers.cli import run_main
from tests.helpers.gpt_corpus import CONTEXT, VAL_FRACTION, make_corpus
from tests.helpers.paths import REPO

pytestmark = pytest.mark.multiprocess  # trains a model and runs the console script


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gpt_inference")
    corpus = make_corpus(root)
    run = root / "run"
    train(
        load_config(
            None,
            [
                "run.task=gpt",
                "model.d_model=16",
                "model.n_layers=2",
                "model.n_heads=2",
                "model.mlp_ratio=2",
                f"model.context={CONTEXT}",
                f"data.val_fraction={VAL_FRACTION}",
                f"data.source=[{root / 'src'}]",
                f"data.path={corpus}",
                f"run.dir={run}",
                "training.steps=30",
                "optim.name=adam",
                "optim.lr=0.01",
                "training.global_batch_size=8",
                "logging.progress=false",
                "logging.tensorboard=false",
            ],
        ),
        resume="none",
    )
    return run


def test_generate_prints_the_prompt_and_its_continuation(run_dir):
    # As a user runs it: the console script in a fresh process.
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("neural-arch")),
            "generate",
            "--checkpoint",
            str(run_dir),
            "--prompt",
            "the ",
            "--length",
            "40",
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.rstrip("\n")
    assert text.startswith("the ") and len(text.encode()) >= 40  # replaced invalid bytes may grow it, never shrink


@pytest.mark.parametrize("length", [10, 3 * CONTEXT])  # within the context, and sliding past it
def test_greedy_output_with_the_kv_cache_equals_decoding_without_it(run_dir, capsys, length):
    outs = []
    for flag in ([], ["--no-cache"]):
        code, out, err = run_main(
            [
                "generate",
                "--checkpoint",
                str(run_dir),
                "--prompt",
                "of the",
                "--temperature",
                "0",
                "--length",
                str(length),
                *flag,
            ],
            capsys,
        )
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1]
    # ... and what the command printed is the model's greedy decoding of the checkpoint's weights.
    model = model_from_state(read_checkpoint(str(run_dir)))
    expected = b"of the" + generate(model, b"of the", length, temperature=0, use_cache=False)
    assert outs[0] == expected.decode("utf-8", "replace") + "\n"


def test_sampling_is_reproducible_by_seed_and_top_1_is_greedy(run_dir, capsys):
    base = ["generate", "--checkpoint", str(run_dir / "checkpoints"), "--prompt", "in", "--length", "30"]
    first, again, other = (run_main(base + ["--seed", seed], capsys)[1] for seed in ("7", "7", "8"))
    assert first == again and first != other
    top1 = run_main(base + ["--top-k", "1", "--seed", "9"], capsys)[1]
    greedy = run_main(base + ["--temperature", "0"], capsys)[1]
    assert top1 == greedy


def test_a_model_that_does_not_generate_text_is_refused_in_one_line(tmp_path, capsys):
    train(
        load_config(
            None, [f"run.dir={tmp_path}", "training.steps=2", "logging.progress=false", "logging.tensorboard=false"]
        ),
        resume="none",
    )
    code, _, err = run_main(["generate", "--checkpoint", str(tmp_path), "--prompt", "x"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("neural-arch generate: error: task RegressionTask does not generate text")


def test_torchscript_export_equals_the_eager_model(run_dir, tmp_path, capsys):
    out = tmp_path / "gpt.ts"
    code, printed, err = run_main(["export", "--checkpoint", str(run_dir), "--output", str(out)], capsys)
    assert code == 0, err
    assert f"wrote {out}" in printed
    scripted = torch.jit.load(str(out))
    model = model_from_state(read_checkpoint(str(run_dir)))
    g = torch.Generator().manual_seed(1)
    for length in (1, 5, CONTEXT):  # other lengths than the export's own example
        x = torch.randint(0, 256, (3, length), generator=g)
        with torch.no_grad():
            torch.testing.assert_close(scripted(x), model(x), rtol=0, atol=1e-4)
    with pytest.raises(Exception, match=f"context is {CONTEXT}"):
        scripted(torch.zeros(1, CONTEXT + 1, dtype=torch.long))
