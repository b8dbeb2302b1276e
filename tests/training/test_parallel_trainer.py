"""``neural-arch train`` on parallel layouts (the ``parallel:`` section) equals one process.

Run: ``.venv/bin/python -m pytest tests/training/test_parallel_trainer.py -q``
A tiny float64 GPT (tests/helpers/trainer_runs.py's ``gpt_args``: 27 windows per epoch in
global batches of 6, so every epoch ends with an uneven last share), Adam, 10 steps, the
loss logged at every step. Tolerances: parameters within 1e-10, every logged loss and the
validation bits per byte within 1e-12 relative (only summation order differs). Checkpoints
hold the full single-process state, so a run saved on one layout resumes on another.
"""

import math
import shutil
from pathlib import Path

import pytest
import torch

from neural_arch.distributed.checkpoint import CheckpointError, load_checkpoint
from tests.helpers.cli import cli
from tests.helpers.gpt_corpus import make_corpus
from tests.helpers.layout_runs import EVERY_STEP, assert_same_run, losses, same_samples, train
from tests.helpers.run_outputs import assert_params, final_params
from tests.helpers.trainer_runs import BASE, gpt_args, launch_fault

pytestmark = pytest.mark.multiprocess  # every test here launches ranks

BATCH_8 = "training.global_batch_size=8"  # 27 samples: the last batch has 3, so one of 4 shares is empty
PIPE = ["parallel.pp=2", "parallel.microbatches=3"]  # 6 samples per global batch: 2 per micro-batch


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("gpt"))


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("ref") / "run"
    train(run, corpus, 10)
    return run


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "layout",
    [
        ["parallel.dp_shard=2"],  # FSDP2 (ZeRO-3)
        ["parallel.dp_shard=2", "training.grad_accum_steps=3"],  # one reduce-scatter per step, not per micro-batch
        ["parallel.tp=2"],  # tensor parallel: heads split
        ["parallel.dp_shard=2", "parallel.activation_checkpointing=1", "parallel.reshard_after_forward=false"],
        ["parallel.dp_shard=2", "parallel.tp=2"],  # 2-D: FSDP over tensor-parallel shards, 4 ranks
        ["parallel.dp_replicate=2", "parallel.dp_shard=2", BATCH_8],  # HSDP: 2 replicas of a 2-way shard, 4 ranks
        ["parallel.pp=2", "parallel.microbatches=2", "parallel.pp_schedule=gpipe"],  # 3 + 3 rows, the last 2 + 1
        [*PIPE, "parallel.pp_schedule=1f1b"],
        [*PIPE, "parallel.dp_shard=2"],  # 2 pipelines of 2 stages, FSDP across, 4 ranks
    ],
    ids=[
        "fsdp2",
        "fsdp2+accum3",
        "tp2",
        "fsdp2+checkpointing",
        "fsdp2+tp2",
        "hsdp2x2",
        "pp2-gpipe",
        "pp2-1f1b",
        "pp2+fsdp2",
    ],
)
def test_layout_equals_one_process(corpus, reference, tmp_path, layout):
    sizes = {"parallel.tp=2": 2, "parallel.dp_shard=2": 2, "parallel.dp_replicate=2": 2, "parallel.pp=2": 2}
    procs = math.prod(sizes.get(item, 1) for item in layout)
    if BATCH_8 in layout:  # 4 data-parallel ranks need a batch they divide: its own reference
        reference = tmp_path / "reference"
        train(reference, corpus, 10, "--set", BATCH_8)
    train(tmp_path / "run", corpus, 10, "--set", *layout, procs=procs)
    assert_same_run(tmp_path / "run", reference)
    assert same_samples(tmp_path / "run", reference)
    # The report's generated text: sharded layouts generate on the placed model on every rank
    # (never gathered), pipelines from the gathered model; both as one process does.
    assert generated(tmp_path / "run") == generated(reference)


def generated(run: Path) -> str:
    report = (run / "report.md").read_text()
    assert "## Samples" in report
    return report.split("## Samples", 1)[1]


def assert_resumed_exactly(run: Path, whole: Path) -> None:
    """Final parameters within 1e-10 of the uninterrupted run, and the same sample ids at every step."""
    assert_params(final_params(run), final_params(whole), atol=1e-10)
    assert same_samples(run, whole)  # none skipped or repeated across the resume


@pytest.mark.timeout(600)
def test_saved_on_one_process_resumes_on_an_interleaved_pipeline(corpus, tmp_path):
    """4 blocks, 2 stages per pipeline rank (stages 0 and 2 on rank 0): the checkpoint is loaded
    into, and the final one gathered from, two stages per rank."""
    blocks = ["--set", "model.n_layers=4"]
    train(tmp_path / "whole", corpus, 10, *blocks)
    run = tmp_path / "run"
    train(run, corpus, 5, *blocks)
    train(
        run,
        corpus,
        10,
        *blocks,
        "parallel.pp=2",
        "parallel.microbatches=2",
        "parallel.pp_schedule=interleaved_1f1b",
        procs=2,
    )
    assert "resumed from step 5" in (run / "logs" / "rank_0.log").read_text()
    assert_resumed_exactly(run, tmp_path / "whole")


@pytest.mark.parametrize(
    "layout, words",
    [
        (["parallel.dp_shard=3"], "= 3 but the world has 2 processes"),
        (["parallel.tp=2", "parallel.dp_shard=2"], "= 4 but the world has 2 processes"),
        (["parallel.pp=2", "parallel.microbatches=4"], "not divisible by parallel dp_size 1 x parallel.microbatches 4"),
        ([*PIPE, "training.grad_accum_steps=2"], "a pipeline already accumulates over parallel.microbatches"),
        (["parallel.pp=2", "parallel.microbatches=1"], "microbatches=1 is less than pp=2"),
        (["parallel.tp=2", "model.n_heads=1"], "does not divide the model's 1 attention heads"),
        (["parallel.tp=2", "regression"], "run.task='regression' has none"),  # an app without a plan
    ],
)
def test_bad_layouts_are_one_line_and_exit_2(corpus, tmp_path, layout, words):
    app = BASE if layout[-1] == "regression" else gpt_args(corpus)
    layout = [item for item in layout if item != "regression"]
    proc = cli("train", *app, "--set", f"run.dir={tmp_path / 'run'}", *layout, "--nproc-per-node", "2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "run").exists()  # refused before any rank started


@pytest.mark.timeout(600)
def test_killed_rank_on_fsdp_resumes_bitwise(corpus, tmp_path):
    """SIGKILL of rank 1 after step 7 (last checkpoint: step 4); the launcher restarts both ranks."""
    layout = ["--set", "parallel.dp_shard=2", "training.steps=12", "checkpoint.every_steps=4"]
    runs = {}
    for mode in ("none", "kill"):
        run = tmp_path / mode
        proc = launch_fault(mode, 7, 2, *gpt_args(corpus), *EVERY_STEP, "--set", f"run.dir={run}", *layout)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs[mode] = run
    assert "resumed from step 4" in (runs["kill"] / "logs" / "rank_0.log").read_text()
    assert_params(final_params(runs["kill"]), final_params(runs["none"]), atol=0)
    assert losses(runs["kill"]) == losses(runs["none"])


@pytest.mark.timeout(600)
def test_saved_on_fsdp_resumes_on_tensor_parallel_and_on_one_process(corpus, reference, tmp_path):
    """Saved at step 5 on FSDP x2 with checkpoint.format=sharded (each rank writes its own
    shards, nothing gathered); resumed on TP x2 (saving full checkpoints from there) and, from
    a copy, on 1 process; generate reads the shards in one process."""
    run, copy = tmp_path / "tp", tmp_path / "one"
    train(run, corpus, 5, "--set", "parallel.dp_shard=2", "checkpoint.format=sharded", procs=2)
    step = run / "checkpoints" / "step_00000005"
    assert (step / "shards" / ".metadata").is_file() and len(list((step / "shards").glob("*.distcp"))) == 2
    assert "model" not in torch.load(step / "state.pt", weights_only=True)  # the weights are only in the shards
    shutil.copytree(run, copy, symlinks=True)
    train(run, corpus, 10, "--set", "parallel.tp=2", procs=2)
    train(copy, corpus, 10, procs=1)
    for resumed in (run, copy):
        assert "resumed from step 5" in (resumed / "logs" / "rank_0.log").read_text()
        assert_resumed_exactly(resumed, reference)
    kept = copy / "checkpoints" / "step_00000005"  # keep_last=3: steps 5, 8 and 10
    text = cli(
        "generate", "--checkpoint", str(kept), "--prompt", "ab", "--length", "8", "--temperature", "0", timeout=120
    )
    assert text.returncode == 0 and text.stdout.strip(), text.stdout + text.stderr
    # A damaged shard makes its step unusable (the manifest's sha256 covers every shard file).
    shard = next((kept / "shards").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-1] + b"x")
    with pytest.raises(CheckpointError, match="does not match the sha256"):
        load_checkpoint(kept)


@pytest.mark.timeout(600)
def test_pipeline_shards_resume_on_one_process_and_back(corpus, reference, tmp_path):
    """A pipeline saves sharded checkpoints by default (each stage rank writes its own; the head's
    tied copy of the embedding keeps one process's optimizer name): resumed at step 5 on 1 process;
    and one process's sharded step 5 resumed on the pipeline. Both end as the uninterrupted run."""
    piped, single = tmp_path / "piped", tmp_path / "single"
    train(piped, corpus, 5, "--set", *PIPE, procs=2)
    assert (piped / "checkpoints" / "step_00000005" / "shards" / ".metadata").is_file()
    train(piped, corpus, 10, procs=1)
    train(single, corpus, 5, "--set", "checkpoint.format=sharded", procs=1)
    train(single, corpus, 10, "--set", *PIPE, procs=2)
    for resumed in (piped, single):
        assert "resumed from step 5" in (resumed / "logs" / "rank_0.log").read_text()
        assert_resumed_exactly(resumed, reference)


def test_report_false_skips_the_apps_report_only(corpus, tmp_path):
    run = tmp_path / "run"
    train(run, corpus, 2, "--set", "training.report=false", "parallel.dp_shard=2", procs=2)
    assert not (run / "report.md").exists()
    assert (run / "summary.json").exists() and (run / "loss.png").exists()
