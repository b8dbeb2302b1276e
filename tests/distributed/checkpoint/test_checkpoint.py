"""Checkpoints: bitwise round trip, retention, fallback from damage, failed writes, ranks, DCP resharding.

Run: ``.venv/bin/python -m pytest tests/distributed/checkpoint/test_checkpoint.py -q``
"""

import errno
import os
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from neural_arch.distributed import init_process_group
from neural_arch.distributed.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    load_sharded,
    save_checkpoint,
    save_sharded,
)
from tests.helpers.multiproc import run_ranks


def realistic_state(seed: int = 0) -> dict:
    """What a trainer saves: model + momentum optimizer after a step, RNG, counters, nesting."""
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "rng": torch.get_rng_state(),
        "rank_rng": [torch.Generator().manual_seed(seed * 10 + r).get_state() for r in range(3)],
        "step": 7 + seed,
        "loss": 0.1 + seed / 3,
        "sampler": {"epoch": 2, "position": 40, "extra": {"flag": True, "name": "icenet", "none": None}},
        "shape": (3, 4),
    }


def assert_same(got, want, where="state"):
    """Bitwise equality, including types, dtypes and shapes."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, where
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), f"{where}: bytes differ"
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            assert_same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def entries(directory) -> list[str]:
    return sorted(os.listdir(directory))


def pointers(directory) -> dict:
    return {name: os.readlink(directory / name) for name in ("last", "best") if (directory / name).is_symlink()}


def test_round_trip_is_bitwise(tmp_path):
    state = realistic_state()
    info = save_checkpoint(tmp_path, 20, state, metric=0.25)
    assert info.path == tmp_path / "step_00000020" and info.step == 20 and info.metric == 0.25
    assert entries(info.path) == ["manifest.json", "state.pt"]
    loaded_info, loaded = load_checkpoint(tmp_path)
    assert loaded_info == info
    assert_same(loaded, state)
    # A step directory can be loaded directly, too.
    assert_same(load_checkpoint(info.path)[1], state)


def test_no_checkpoint_is_none(tmp_path):
    assert load_checkpoint(tmp_path / "missing") is None
    assert load_checkpoint(tmp_path) is None
    assert list_checkpoints(tmp_path) == []


def test_retention_keeps_newest_and_best(tmp_path):
    metrics = {10: 0.5, 20: 0.2, 30: 0.4, 40: 0.6, 50: 0.3}
    for step, metric in metrics.items():
        save_checkpoint(tmp_path, step, {"step": step}, keep_last=2, metric=metric)
    assert entries(tmp_path) == ["best", "last", "step_00000020", "step_00000040", "step_00000050"]
    assert pointers(tmp_path) == {"last": "step_00000050", "best": "step_00000020"}
    assert [(i.step, i.metric) for i in list_checkpoints(tmp_path)] == [(20, 0.2), (40, 0.6), (50, 0.3)]
    # A new best releases the old one.
    save_checkpoint(tmp_path, 60, {"step": 60}, keep_last=2, metric=0.1)
    assert entries(tmp_path) == ["best", "last", "step_00000050", "step_00000060"]
    assert pointers(tmp_path) == {"last": "step_00000060", "best": "step_00000060"}


def test_best_higher_is_better(tmp_path):
    for step, metric in {1: 0.7, 2: 0.9, 3: 0.8, 4: None}.items():
        save_checkpoint(tmp_path, step, {}, keep_last=1, metric=metric, lower_is_better=False)
    assert entries(tmp_path) == ["best", "last", "step_00000002", "step_00000004"]
    assert pointers(tmp_path) == {"last": "step_00000004", "best": "step_00000002"}


def corrupt(step_dir, how, weight=None):
    state_file, manifest = step_dir / "state.pt", step_dir / "manifest.json"
    if how == "truncated":
        state_file.write_bytes(state_file.read_bytes()[: state_file.stat().st_size // 2])
    elif how == "random_bytes":  # same size, so only the checksum can tell
        state_file.write_bytes(np.random.default_rng(0).bytes(state_file.stat().st_size))
    elif how == "bit_flip":  # still unpickles, with a wrong weight: only the checksum can tell
        data = bytearray(state_file.read_bytes())
        at = data.find(weight.numpy().tobytes())
        assert at > 0
        data[at] ^= 0x01
        state_file.write_bytes(bytes(data))
    elif how == "manifest_missing":
        manifest.unlink()
    elif how == "manifest_garbage":
        manifest.write_text('{"format": 1, "step": ')


@pytest.mark.parametrize("how", ["truncated", "random_bytes", "bit_flip", "manifest_missing", "manifest_garbage"])
def test_damaged_newest_falls_back_with_warning(tmp_path, how):
    good, newer = realistic_state(1), realistic_state(2)
    save_checkpoint(tmp_path, 1, good)
    save_checkpoint(tmp_path, 2, newer)
    corrupt(tmp_path / "step_00000002", how, newer["model"]["weight"])
    with pytest.warns(RuntimeWarning, match=re.escape(f"checkpoint {tmp_path / 'step_00000002'} is unusable")):
        info, state = load_checkpoint(tmp_path)
    assert info.step == 1
    assert_same(state, good)
    with pytest.raises(CheckpointError, match="step_00000002 is unusable"):
        load_checkpoint(tmp_path / "step_00000002")


def test_all_damaged_raises(tmp_path):
    save_checkpoint(tmp_path, 1, {"a": 1})
    corrupt(tmp_path / "step_00000001", "truncated")
    with pytest.raises(CheckpointError, match="none of the 1 checkpoints"):
        load_checkpoint(tmp_path)


def failing_save(obj, f, *args, **kwargs):
    f.write(b"PK\x03\x04 half a zip")  # a real full disk fails part way through
    raise OSError(errno.ENOSPC, "No space left on device")


def test_full_disk_leaves_previous_checkpoint(tmp_path, monkeypatch):
    state = realistic_state()
    save_checkpoint(tmp_path, 1, {"old": True}, metric=0.5)
    save_checkpoint(tmp_path, 2, state, metric=0.4)
    before, before_pointers = entries(tmp_path), pointers(tmp_path)
    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(
        CheckpointError,
        match=re.escape(
            f"could not write checkpoint step 3 to {tmp_path}: no space left on device at {tmp_path}; "
            "the previous checkpoint step 2 is intact"
        ),
    ):
        save_checkpoint(tmp_path, 3, state, metric=0.1)
    assert entries(tmp_path) == before  # no .tmp- left, nothing pruned
    assert pointers(tmp_path) == before_pointers
    info, loaded = load_checkpoint(tmp_path)
    assert info.step == 2
    assert_same(loaded, state)


def test_failed_replace_of_same_step_restores_it(tmp_path, monkeypatch):
    state = realistic_state()
    save_checkpoint(tmp_path, 2, state)
    real_rename = os.rename

    def rename(src, dst):  # fail exactly at the commit: the new dir replacing the old one
        if os.path.basename(src).startswith(".tmp-step_"):
            raise OSError(errno.EIO, "Input/output error")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(CheckpointError, match="the previous checkpoint step 2 is intact"):
        save_checkpoint(tmp_path, 2, {"new": 1})
    monkeypatch.undo()
    assert entries(tmp_path) == ["last", "step_00000002"]
    assert_same(load_checkpoint(tmp_path)[1], state)
    # A successful re-save replaces it.
    save_checkpoint(tmp_path, 2, {"new": 1})
    assert entries(tmp_path) == ["last", "step_00000002"]
    assert load_checkpoint(tmp_path)[1] == {"new": 1}


def test_half_written_tmp_dir_is_ignored_then_cleaned(tmp_path):
    save_checkpoint(tmp_path, 1, {"a": 1})
    crashed = tmp_path / ".tmp-step_00000002-0123456789ab"
    crashed.mkdir()
    (crashed / "state.pt").write_bytes(b"half")
    (tmp_path / ".tmp-last-0123456789ab").write_text("step_00000002\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: a .tmp- dir is not a checkpoint
        info, state = load_checkpoint(tmp_path)
    assert info.step == 1 and state == {"a": 1}
    assert [i.step for i in list_checkpoints(tmp_path)] == [1]
    save_checkpoint(tmp_path, 2, {"a": 2})
    assert entries(tmp_path) == ["last", "step_00000001", "step_00000002"]


class Custom:
    pass


@pytest.mark.parametrize(
    "state, where",
    [
        ({"hooks": {"on_step": lambda: 0}}, "state['hooks']['on_step']"),
        ({"items": [1, Custom()]}, "state['items'][1]"),
        ({"loss": np.float64(0.5)}, "state['loss']"),  # a float subclass that weights_only cannot load
        ({Custom(): 1}, "state key"),
    ],
)
def test_unloadable_content_is_refused_naming_the_key(tmp_path, state, where):
    with pytest.raises(CheckpointError, match=re.escape(where)):
        save_checkpoint(tmp_path, 1, state)
    assert entries(tmp_path) == []


def ranks_save_worker(rank, world_size, directory):
    """Success at step 1, then a full disk on rank 0 only at step 2."""
    init_process_group(backend="gloo")
    calls = []
    real_save = torch.save

    def counting_save(*args, **kwargs):  # this process is throwaway: patch torch itself
        calls.append(1)
        return real_save(*args, **kwargs)

    torch.save = counting_save
    info = save_checkpoint(directory, 1, realistic_state())
    loaded_step = load_checkpoint(directory)[0].step  # right after return, on every rank
    if rank == 0:
        torch.save = failing_save
    try:
        save_checkpoint(directory, 2, realistic_state())
        error = None
    except CheckpointError as exc:
        error = str(exc)
    return info, len(calls), loaded_step, error


@pytest.mark.multiprocess
def test_ranks_write_once_and_fail_together(tmp_path):
    results = run_ranks(ranks_save_worker, 2, args=(tmp_path,), timeout=60)
    (info0, calls0, step0, error0), (info1, calls1, step1, error1) = results
    assert info0 == info1 and info0.step == 1
    assert (calls0, calls1) == (1, 0)
    assert step0 == step1 == 1
    assert error0 is not None and "no space left on device" in error0
    assert error1 is not None and "no space left on device" in error1 and "rank 0" in error1
    assert entries(tmp_path) == ["last", "step_00000001"]
    assert_same(load_checkpoint(tmp_path)[1], realistic_state())


FULL = torch.arange(7 * 3, dtype=torch.float64).reshape(7, 3)  # 7 rows: uneven over 2 and 3 ranks


def sharded_worker(rank, world_size, directory, save):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    init_process_group(backend="gloo")
    mesh = init_device_mesh("cpu", (world_size,))
    source = FULL if save else torch.zeros_like(FULL)
    state = {"w": distribute_tensor(source, mesh, [Shard(0)]), "b": source[0].clone(), "step": 5 if save else 0}
    if save:
        save_sharded(directory, state)
        return None
    load_sharded(directory, state)
    # numpy, not tensors: a tensor sent back through the queue dies with its process's shared memory
    return state["w"].full_tensor().numpy(), state["w"].to_local().shape[0], state["b"].numpy(), state["step"]


@pytest.mark.multiprocess
def test_sharded_save_on_2_loads_on_1_and_3(tmp_path):
    target = tmp_path / "sharded"
    run_ranks(sharded_worker, 2, args=(target, True), timeout=60)
    assert entries(tmp_path) == ["sharded"]  # no .tmp- left
    single = {"w": torch.zeros_like(FULL), "b": torch.zeros(3, dtype=torch.float64), "step": 0}
    load_sharded(target, single)  # world size 1, no process group
    assert torch.equal(single["w"], FULL) and torch.equal(single["b"], FULL[0]) and single["step"] == 5
    results = run_ranks(sharded_worker, 3, args=(target, False), timeout=60)
    for full, _local_rows, bias, step in results:
        assert np.array_equal(full, FULL.numpy()) and np.array_equal(bias, FULL[0].numpy()) and step == 5
    assert [r[1] for r in results] == [3, 3, 1]  # really sharded three ways


def test_sharded_single_process_replaces_and_reports_missing(tmp_path):
    target = tmp_path / "sharded"
    save_sharded(target, {"w": torch.ones(2)})
    save_sharded(target, {"w": torch.full((2,), 2.0)})
    assert entries(tmp_path) == ["sharded"]
    out = {"w": torch.zeros(2)}
    load_sharded(target, out)
    assert torch.equal(out["w"], torch.full((2,), 2.0))
    with pytest.raises(CheckpointError, match="no sharded checkpoint"):
        load_sharded(tmp_path / "nothing", out)
