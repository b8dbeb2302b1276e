"""``profiling:``: torch.profiler over a window of steps, one Chrome/TensorBoard trace per chosen rank.

Run: ``.venv/bin/python -m pytest tests/training/test_profiling.py -q``
The regression MLP on 2 real ranks profiles steps 3-4 on both ranks; on 1 process from step 1.
Each trace is read back as the Chrome trace JSON that Perfetto and TensorBoard's profiler
plugin load, with the model's matrix multiplications in it; a rank outside the world is one line.
"""

import json

import pytest

from tests.helpers.cli import cli

pytestmark = pytest.mark.multiprocess  # runs the CLI

COMMON = ["--set", "training.steps=6", "logging.progress=false", "logging.tensorboard=false"]


def traces(run):
    return sorted((run / "profiles").glob("*.pt.trace.json"))


def test_one_trace_per_chosen_rank_with_the_steps_ops(tmp_path):
    run = tmp_path / "run"
    window = ["profiling.first_step=3", "profiling.steps=2", "profiling.ranks=[0,1]"]
    proc = cli("train", *COMMON, f"run.dir={run}", *window, "--nproc-per-node", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = traces(run)
    assert [p.name.split(".")[0] for p in found] == ["rank0", "rank1"], found
    for trace in found:
        events = json.loads(trace.read_text())["traceEvents"]
        names = {e.get("name") for e in events}
        assert "aten::addmm" in names or "aten::mm" in names, sorted(n for n in names if n)[:40]


def test_from_the_first_step_on_one_process_and_a_bad_rank(tmp_path):
    run = tmp_path / "run"
    proc = cli("train", *COMMON, f"run.dir={run}", "profiling.first_step=1", "profiling.steps=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name.split(".")[0] for p in traces(run)] == ["rank0"]
    bad = cli("train", *COMMON, f"run.dir={tmp_path / 'bad'}", "profiling.first_step=1", "profiling.ranks=[3]")
    assert bad.returncode == 2 and "profiling.ranks=[3] names a rank outside" in bad.stderr, bad.stderr
