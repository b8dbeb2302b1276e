"""``neural-arch evaluate``: a checkpoint's validation metrics equal the trainer's at that step.

The tiny recipe in float64 (``training.precision=fp64``) trains 4 steps on one process,
validating and saving at steps 2 and 4. On one process the evaluation repeats the trainer's
computation, so the metrics are equal bit for bit (tolerance 0); on two processes the sums
are reduced in another order, so within 1e-12; there ``--json`` still prints the JSON alone on
stdout (rank 0's, unprefixed), for a script to parse.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import cli


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("evaluate") / "run"
    settings = ["training.steps=4", "training.precision=fp64", "training.val_every=2", "checkpoint.every_steps=2"]
    proc = cli("train", "--config", "tiny", "--set", f"run.dir={run}", *settings)
    assert proc.returncode == 0, proc.stderr
    return run


def _validation_rows(run: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: {k: v for k, v in row.items() if k.startswith("val/")} for row in rows if "val/loss" in row}


def test_one_process_equals_the_trainer_exactly(run_dir: Path) -> None:
    proc = cli("evaluate", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    written = json.loads((run_dir / "eval_step_4.json").read_text())
    assert written["step"] == 4 and written["world_size"] == 1
    assert written["metrics"] == _validation_rows(run_dir)[4]  # exact
    assert written["metrics"]["val/loss"] == json.loads((run_dir / "summary.json").read_text())["val/loss"]
    assert f"val/loss {written['metrics']['val/loss']!r}" in proc.stdout

    step_dir = run_dir / "checkpoints" / "step_00000002"
    proc = cli("evaluate", str(step_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["metrics"] == _validation_rows(run_dir)[2]


@pytest.mark.multiprocess
def test_two_processes_within_1e_12_and_json_on_stdout(run_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "eval.json"
    proc = cli("evaluate", str(run_dir), "--nproc-per-node", "2", "--output", str(output), "--json")
    assert proc.returncode == 0, proc.stderr
    written = json.loads(output.read_text())
    assert json.loads(proc.stdout) == written  # stdout is the JSON alone: rank 0's, no "[rank 0] " before it
    assert written["world_size"] == 2
    expected = _validation_rows(run_dir)[4]
    assert written["metrics"].keys() == expected.keys()
    for name, value in expected.items():
        assert written["metrics"][name] == pytest.approx(value, rel=0, abs=1e-12)


def test_user_errors_are_one_line_exit_2(run_dir: Path, tmp_path: Path) -> None:
    proc = cli("evaluate", str(tmp_path / "missing"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "does not exist" in proc.stderr

    proc = cli("evaluate", str(tmp_path))  # a directory without checkpoints
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "no checkpoint there" in proc.stderr

    copied = tmp_path / "copied"  # a downloaded run whose config names a module beside it: never imported
    (copied / "checkpoints").mkdir(parents=True)
    (copied / "checkpoints" / "step_00000004").symlink_to(run_dir / "checkpoints" / "step_00000004")
    (tmp_path / "planted.py").write_text("raise SystemExit('PLANTED-RAN')\n")
    (copied / "config.yaml").write_text("run:\n  task: planted:Task\n")
    proc = cli("evaluate", str(copied), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "PLANTED-RAN" not in proc.stderr and "--set run.task=planted:Task" in proc.stderr
