"""Background checkpoint writes: training goes on while a save is written, from a copy.

Run: ``.venv/bin/python -m pytest tests/distributed/checkpoint/test_background.py -q``
2 real ranks over gloo. The write is held at a gate (``torch.save`` waits on an event) so what
is checked does not depend on timing: ``save`` returns while the write cannot have finished, the
step directory does not exist yet, and the tensors changed after ``save`` (as training would) do
not change what is written; after ``wait`` the step is committed with the values of the moment
of ``save``. Sharded state (DTensors over the 2 ranks) is written by each rank over the writer's
own process group. A failing write raises the same ``CheckpointError`` on every rank at ``wait``
and leaves the previous checkpoint as it was. Where one rank has no room for its copy (an injected
``StagingRoom``), every rank saves synchronously and rank 0 says so once.
"""

from __future__ import annotations

import contextlib
import io
import threading
from pathlib import Path
from typing import Optional

import pytest
import torch

from neural_arch.distributed import init_process_group
from neural_arch.distributed.checkpoint import CheckpointError, CheckpointWriter, load_checkpoint, load_shards
from neural_arch.distributed.checkpoint.staging_room import StagingRoom
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess  # spawns ranks


def gated_worker(rank: int, world_size: int, directory: str) -> dict:
    import torch.distributed.checkpoint  # noqa: F401 - loaded before the gate, as the writer thread needs it
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    init_process_group(backend="gloo")
    mesh = init_device_mesh("cpu", (world_size,))
    weights = torch.arange(8, dtype=torch.float64)
    sharded = distribute_tensor(torch.arange(8, dtype=torch.float64) * 10, mesh, [Shard(0)])
    gate, real_save = threading.Event(), torch.save

    def gated_save(*args, **kwargs):
        assert gate.wait(60), "the test never opened the gate"
        return real_save(*args, **kwargs)

    torch.save = gated_save
    step_dir = Path(directory) / "step_00000003"
    with CheckpointWriter(background=True) as writer:
        writer.save(directory, 3, {"w": weights, "step": 3}, shards={"s": sharded})
        returned_before_commit = not step_dir.exists()
        weights.add_(100)  # training goes on: the saved copy must not see this
        sharded.to_local().add_(100)
        gate.set()
        writer.wait()
    torch.save = real_save
    info, state = load_checkpoint(directory)
    target = {"s": distribute_tensor(torch.zeros(8, dtype=torch.float64), mesh, [Shard(0)])}
    load_shards(info.path, target)
    return {
        "returned_before_commit": returned_before_commit,
        "step": info.step,
        "w": state["w"].tolist(),
        "s": target["s"].full_tensor().tolist(),
    }


def failing_worker(rank: int, world_size: int, directory: str) -> str:
    init_process_group(backend="gloo")
    with CheckpointWriter(background=True) as writer:
        writer.save(directory, 1, {"w": torch.ones(3)})
        writer.wait()

        def broken_save(*args, **kwargs):
            raise OSError("No space left on device")

        torch.save = broken_save
        writer.save(directory, 2, {"w": torch.zeros(3)})
        try:
            writer.wait()
        except CheckpointError as exc:
            return str(exc)
    return "no error"


def test_save_returns_before_the_write_and_writes_the_state_of_that_moment(tmp_path):
    for rank, got in enumerate(run_ranks(gated_worker, 2, args=(str(tmp_path),))):
        assert got["returned_before_commit"], rank
        assert got["step"] == 3
        assert got["w"] == [float(i) for i in range(8)], rank
        assert got["s"] == [float(10 * i) for i in range(8)], rank


def test_a_failed_background_write_is_reported_on_every_rank_and_keeps_the_previous(tmp_path):
    messages = run_ranks(failing_worker, 2, args=(str(tmp_path),))
    assert messages[0] == messages[1]  # the same line on every rank
    assert "could not write checkpoint step 2" in messages[0] and "No space left on device" in messages[0]
    info, state = load_checkpoint(tmp_path)
    assert info.step == 1 and torch.equal(state["w"], torch.ones(3))
    assert not list(tmp_path.glob(".tmp-*")) and not (tmp_path / "step_00000002").exists()


class NoRoomOnRank1(StagingRoom):
    """Rank 1 has no room for its copy (as a rank whose memory cgroup is nearly full)."""

    def shortfall(self, need: int, device_need: int = 0) -> Optional[str]:
        return f"a {need} byte staging copy does not fit" if torch.distributed.get_rank() == 1 else None


def no_room_worker(rank: int, world_size: int, directory: str) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    init_process_group(backend="gloo")
    mesh = init_device_mesh("cpu", (world_size,))
    sharded = distribute_tensor(torch.arange(8, dtype=torch.float64), mesh, [Shard(0)])
    step_dir, said = Path(directory) / "step_00000004", io.StringIO()
    with CheckpointWriter(background=True, room=NoRoomOnRank1()) as writer, contextlib.redirect_stdout(said):
        writer.save(directory, 4, {"w": torch.ones(2), "step": 4}, shards={"s": sharded})
        committed_at_return = step_dir.exists()  # synchronous: on disk before save returns
        threaded = writer._thread is not None
        sharded.to_local().add_(100)
        writer.save(directory, 5, {"w": torch.ones(2), "step": 5}, shards={"s": sharded})
        writer.wait()
    return {"committed_at_return": committed_at_return, "threaded": threaded, "said": said.getvalue()}


def test_when_one_rank_has_no_room_for_its_copy_every_rank_saves_synchronously(tmp_path):
    got = run_ranks(no_room_worker, 2, args=(str(tmp_path),))
    for rank, result in enumerate(got):
        assert result["committed_at_return"] and not result["threaded"], rank
    assert got[1]["said"] == ""  # rank 0 says it, once for both saves
    out = got[0]["said"]
    assert out.count("note: checkpoint step 4 saved synchronously") == 1 and "on rank 1 a " in out
    assert "step 5 saved synchronously" not in out
    info, state = load_checkpoint(tmp_path)
    assert info.step == 5 and state["step"] == 5
