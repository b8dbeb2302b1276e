"""``checkpoints/last`` and ``best``: symlinks a person can open by hand, never dangling, and
old text pointers still read.

Run: ``.venv/bin/python -m pytest tests/distributed/checkpoint/test_pointers.py -q``
"""

import os
from pathlib import Path

import pytest
import torch

from neural_arch.distributed.checkpoint import load_checkpoint, record_metric, save_checkpoint
from neural_arch.distributed.checkpoint.layout import pointer_target
from tests.helpers.cli import cli
from tests.helpers.paths import REPO


def links(directory: Path) -> dict[str, str]:
    """``{"last": "step_...", ...}`` for every symlink in ``directory``; fails on a dangling one."""
    found = {}
    for entry in directory.iterdir():
        if entry.is_symlink():
            assert entry.resolve().is_dir(), f"{entry} -> {os.readlink(entry)} dangles"
            found[entry.name] = os.readlink(entry)
    return found


@pytest.mark.multiprocess
def test_last_state_pt_opens_with_torch_load_after_a_run(tmp_path):
    run = tmp_path / "run"
    proc = cli(
        "train",
        "--config",
        str(REPO / "configs" / "tiny.yaml"),
        "--set",
        f"run.dir={run}",
        "checkpoint.every_steps=3",
        "checkpoint.keep_last=1",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    checkpoints = run / "checkpoints"
    assert set(links(checkpoints)) == {"last", "best"}
    by_hand = torch.load(checkpoints / "last" / "state.pt", weights_only=True)
    info, state = load_checkpoint(checkpoints)
    assert os.readlink(checkpoints / "last") == info.path.name == "step_00000020"
    assert by_hand["model"].keys() == state["model"].keys()
    assert all(torch.equal(by_hand["model"][k], state["model"][k]) for k in state["model"])
    assert load_checkpoint(checkpoints / "best")[0].path.parent == checkpoints


def test_pruning_never_leaves_a_dangling_link(tmp_path):
    metrics = [0.5, 0.2, 0.4, None, 0.6, 0.1, 0.3, 0.3]
    for step, metric in enumerate(metrics, start=1):
        save_checkpoint(tmp_path, step, {"step": step}, keep_last=1, metric=metric)
        found = links(tmp_path)  # asserts that each resolves
        assert found["last"] == f"step_{step:08d}"
        assert torch.load(tmp_path / "last" / "state.pt", weights_only=True) == {"step": step}
        assert torch.load(tmp_path / "best" / "state.pt", weights_only=True)["step"] == min(step, 2 if step < 6 else 6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "last", "step_00000006", "step_00000008"]


def test_old_text_pointers_still_resume_and_become_links(tmp_path):
    for step, metric in ((1, 0.1), (2, 0.5), (3, 0.9)):
        save_checkpoint(tmp_path, step, {"step": step}, keep_last=1, metric=metric)
    for name, target in (("last", "step_00000003"), ("best", "step_00000001")):  # as runs before links wrote them
        (tmp_path / name).unlink()
        (tmp_path / name).write_text(target + "\n")
    assert pointer_target(tmp_path, "best") == tmp_path / "step_00000001"
    assert load_checkpoint(tmp_path)[1] == {"step": 3}
    assert load_checkpoint(tmp_path / "last")[1] == {"step": 3}
    assert load_checkpoint(tmp_path / "best")[1] == {"step": 1}
    save_checkpoint(tmp_path, 4, {"step": 4}, keep_last=1, metric=0.7)  # the old best is still kept
    assert links(tmp_path) == {"last": "step_00000004", "best": "step_00000001"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "last", "step_00000001", "step_00000004"]


def test_a_pointer_swap_leaves_no_staging_link(tmp_path):
    for step in range(1, 4):
        save_checkpoint(tmp_path, step, {"step": step}, keep_last=2)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_metric_recorded_after_the_save_releases_the_old_best(tmp_path):
    # The trainer's order: save the step without a metric, validate it, record the metric. A new
    # best then frees the old one at once: at most keep_last steps plus best stay, even at the end.
    for step, metric in ((10, 0.1), (20, 0.9), (30, 0.9)):
        save_checkpoint(tmp_path, step, {"step": step}, keep_last=2, metric=metric)
    save_checkpoint(tmp_path, 40, {"step": 40}, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best",
        "last",
        "step_00000010",
        "step_00000030",
        "step_00000040",
    ]
    record_metric(tmp_path, 40, 0.05)
    assert links(tmp_path) == {"last": "step_00000040", "best": "step_00000040"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "last", "step_00000030", "step_00000040"]
    save_checkpoint(tmp_path, 50, {"step": 50}, keep_last=2)
    record_metric(tmp_path, 50, 0.5)  # not the best: the old best stays beside the last two
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "last", "step_00000040", "step_00000050"]
