"""A crafted manifest or DCP metadata cannot make a loader read outside its step directory,
hang on a FIFO or hash an endless device: the step is refused in one line and loading falls
back to the previous checkpoint.

Run: ``.venv/bin/python -m pytest tests/distributed/checkpoint/test_hostile_manifest.py -q``
Each case rewrites the newest step's ``manifest.json`` to list something hostile (the
fallback must warn naming it); a hang fails through the hard timeout instead of blocking.
"""

import dataclasses
import json
import os
import pickle
import re

import pytest
import torch

from neural_arch.distributed.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_sharded,
    save_checkpoint,
    save_sharded,
)
from neural_arch.distributed.checkpoint.untrusted import read_dcp_metadata


def list_in_manifest(step_dir, name, size=0):
    manifest = json.loads((step_dir / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": "0" * 64, "bytes": size}
    (step_dir / "manifest.json").write_text(json.dumps(manifest))


def plant(step_dir, how, outside):
    """Make ``step_dir``'s manifest list something hostile; returns the name it lists."""
    if how == "dev_zero":
        return "/dev/zero"
    if how == "dotdot":
        (outside / "big").write_bytes(b"x" * 10)
        return "../../outside/big"
    if how == "fifo":
        os.mkfifo(step_dir / "pipe")
        return "pipe"
    if how == "symlink_file":
        (step_dir / "zero").symlink_to("/dev/zero")
        return "zero"
    if how == "symlink_dir":
        (outside / "data").write_bytes(b"y" * 3)
        (step_dir / "sub").symlink_to(outside)
        return "sub/data"
    raise AssertionError(how)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["dev_zero", "dotdot", "fifo", "symlink_file", "symlink_dir"])
def test_hostile_name_is_refused_and_falls_back(tmp_path, how):
    run, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    save_checkpoint(run, 1, {"w": torch.ones(2)})
    save_checkpoint(run, 2, {"w": torch.zeros(2)})
    newest = run / "step_00000002"
    name = plant(newest, how, outside)
    list_in_manifest(newest, name, size=10 if how == "dotdot" else 0)
    with pytest.warns(RuntimeWarning, match=re.escape(f"checkpoint {newest} is unusable")) as seen:
        info, state = load_checkpoint(run)
    assert info.step == 1 and torch.equal(state["w"], torch.ones(2))
    message = str(seen[0].message)
    assert "\n" not in message and repr(name)[:40] in message


@pytest.mark.timeout(30)
def test_manifest_itself_must_be_a_regular_file(tmp_path):
    save_checkpoint(tmp_path, 1, {"w": torch.ones(2)})
    save_checkpoint(tmp_path, 2, {"w": torch.zeros(2)})
    manifest = tmp_path / "step_00000002" / "manifest.json"
    manifest.unlink()
    manifest.symlink_to("/dev/zero")
    with pytest.warns(RuntimeWarning, match="manifest.json is unreadable: .*symlink"):
        info, _ = load_checkpoint(tmp_path)
    assert info.step == 1


@pytest.mark.timeout(30)
def test_a_manifest_over_64_mib_is_refused_unread(tmp_path):
    save_checkpoint(tmp_path, 1, {"w": torch.ones(2)})
    save_checkpoint(tmp_path, 2, {"w": torch.zeros(2)})
    with open(tmp_path / "step_00000002" / "manifest.json", "r+b") as manifest:
        manifest.truncate((64 << 20) + 1)  # sparse: no disk used, and nothing of it is read
    with pytest.warns(RuntimeWarning, match="manifest.json is unreadable: .*67108865 bytes, more than the 67108864"):
        info, _ = load_checkpoint(tmp_path)
    assert info.step == 1


@pytest.mark.timeout(30)
def test_dcp_metadata_naming_a_file_outside_is_refused(tmp_path):
    target = tmp_path / "sharded"
    save_sharded(target, {"w": torch.ones(2)})
    metadata = read_dcp_metadata(target)
    metadata.storage_data = {
        index: dataclasses.replace(info, relative_path="../../../dev/zero")
        for index, info in metadata.storage_data.items()
    }
    (target / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(CheckpointError, match=re.escape("names data file '../../../dev/zero'")):
        load_sharded(target, {"w": torch.zeros(2)})
