"""Recovery from a keeper's memory (issue 36, build 1, first piece): ranks SIGKILLed mid-run resume
from the snapshot a ``SnapshotKeeper`` holds, read no checkpoint file, and end bitwise equal.

Run: ``.venv/bin/python -m pytest tests/training/test_memory_recovery.py -q`` (2-rank gloo runs on
127.0.0.1; four tests, 20-90 s each on two shared cores).

The keeper runs in the test process, as it would in the launcher agent: it outlives the ranks.
A run is 20 steps of the float64 regression MLP (``TWENTY_STEPS``: two epoch ends, uneven
batches, 2 micro-batches), ``checkpoint.every_steps: 0`` (the trainer's only disk write is the
last step's), a snapshot every 3 steps. Attempt 1 is SIGKILLed (both ranks) at step 7, attempt 2
at step 11; attempt 3 finishes. Each restarted attempt must restore from the keeper (step 6,
then 9) while the checkpoint folder holds no step, and the final weights must equal those of an
uninterrupted 2-rank run exactly (``torch.equal``: the same world size, so the same sums).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Optional, Union

import pytest
import torch
from torch.distributed.tensor import DTensor

from neural_arch.distributed.checkpoint.keeper_protocol import KeeperAddress, KeeperClient
from neural_arch.distributed.checkpoint.memory_keeper import SnapshotKeeper
from neural_arch.distributed.launcher.job_token import JobToken
from neural_arch.training.callbacks import Callback, StepEvent
from tests.helpers.multiproc import RankFailed, run_ranks
from tests.helpers.trainer_runs import TWENTY_STEPS

EVERY = 3
Keepers = Optional[Union[KeeperAddress, list[KeeperAddress]]]


class _KillAt(Callback):
    """SIGKILL this rank after step ``step`` (once the snapshot in flight has reached the keeper)."""

    def __init__(self, step: int, snapshots: Any) -> None:
        self.step, self.snapshots = step, snapshots

    def on_step(self, event: StepEvent) -> None:
        if event.step == self.step:
            self.snapshots.wait()
            os.kill(os.getpid(), signal.SIGKILL)


def _train(rank: int, world: int, run: str, address: Keepers, kill_at: Optional[int], *extra: str) -> Any:
    """Train (``address``: the keeper of every rank, or one per rank: a node each), return the
    weights and what the snapshots did."""
    from neural_arch.training.config import load_config
    from neural_arch.training.memory_snapshot import MemorySnapshots
    from neural_arch.training.trainer import Trainer

    callbacks: list[Callback] = []
    snapshots = None
    if address is not None:
        snapshots = MemorySnapshots(KeeperClient(address[rank] if isinstance(address, list) else address), every=EVERY)
        callbacks.append(snapshots)
    if kill_at is not None:
        callbacks.append(_KillAt(kill_at, snapshots))
    trainer = Trainer(load_config(None, [*TWENTY_STEPS, f"run.dir={run}", *extra]), callbacks=callbacks)
    trainer.train()
    # numpy arrays: a tensor would cross the result queue as shared memory that dies with the rank;
    # a sharded layout's DTensors gathered whole (a collective, in the same order on every rank)
    plain = trainer.components.placement.plain.state_dict().items()
    state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().numpy().copy() for k, v in plain}
    return state, None if snapshots is None else (snapshots.restored, snapshots.pushed, snapshots.fetched)


def _killed(run: Path, address: Keepers, step: int, *extra: str) -> None:
    with pytest.raises(RankFailed, match="exited with code -9"):
        run_ranks(_train, 2, args=(str(run), address, step, *extra), timeout=120)
    if not extra:
        assert not list((run / "checkpoints").glob("step_*")), "a checkpoint was written: the resume could read it"


@pytest.mark.multiprocess
def test_ranks_killed_twice_resume_from_memory_bitwise(tmp_path):
    reference = run_ranks(_train, 2, args=(str(tmp_path / "reference"), None, None), timeout=120)
    run = tmp_path / "run"
    with SnapshotKeeper(JobToken("test-job", "the test"), capacity=16 << 20) as keeper:
        _killed(run, keeper.address, 7)
        assert keeper.newest == 6
        _killed(run, keeper.address, 11)
        assert keeper.newest == 9
        finished = run_ranks(_train, 2, args=(str(run), keeper.address, None), timeout=120)
        assert keeper.held_bytes <= 16 << 20
    for rank in range(2):
        weights, (restored, pushed, fetched) = finished[rank]
        assert restored == 9, f"rank {rank} resumed from {restored}, not the keeper's step 9"
        assert fetched == "mapped", f"rank {rank} read the snapshot as {fetched}, not from the keeper's own file"
        assert pushed == ([12, 15, 18] if rank == 0 else [])
        for name, value in reference[rank][0].items():
            assert torch.equal(torch.from_numpy(weights[name]), torch.from_numpy(value)), (
                f"rank {rank} {name} differs from the uninterrupted run"
            )
    assert [p.name for p in (run / "checkpoints").glob("step_*")] == ["step_00000020"]  # the last step's only
    starts = [
        line.split("] ", 1)[1] for line in (run / "logs" / "rank_0.log").read_text().splitlines() if "start:" in line
    ]
    assert starts == ["start: world 2, step 0", *(f"start: world 2, step {s} (resumed from step {s})" for s in (6, 9))]


@pytest.mark.multiprocess
def test_fsdp_ranks_killed_resume_from_their_own_shards_bitwise(tmp_path):
    """FSDP x2 (``parallel.dp_shard=2``, sharded checkpoints): every rank pushes its own shards
    (two parts a step), both are killed at step 7 and resume from the keeper's step 6, each from
    its own part, reading no file; the weights equal the uninterrupted FSDP run's exactly."""
    fsdp = ("parallel.dp_shard=2",)
    reference = run_ranks(_train, 2, args=(str(tmp_path / "reference"), None, None, *fsdp), timeout=120)
    run = tmp_path / "run"
    with SnapshotKeeper(JobToken("test-job", "the test"), capacity=16 << 20) as keeper:
        _killed(run, keeper.address, 7, *fsdp)
        assert keeper.newest == 6 and not list((run / "checkpoints").glob("step_*"))
        finished = run_ranks(_train, 2, args=(str(run), keeper.address, None, *fsdp), timeout=120)
    for rank in range(2):
        weights, (restored, pushed, _) = finished[rank]
        assert (restored, pushed) == (6, [9, 12, 15, 18]), f"rank {rank}: restored {restored}, pushed {pushed}"
        for name, value in reference[rank][0].items():
            assert torch.equal(torch.from_numpy(weights[name]), torch.from_numpy(value)), f"rank {rank} {name}"
    assert "resumed from step 6" in (run / "logs" / "rank_0.log").read_text()


@pytest.mark.multiprocess
def test_a_disk_checkpoint_newer_than_the_keepers_step_wins(tmp_path):
    """Snapshots at 3 and 6, a synchronous disk checkpoint at 4 and 8, killed after step 8: the
    restart resumes from the disk's step 8 (fewer steps to recompute), still bitwise equal."""
    disk = ("checkpoint.every_steps=4", "checkpoint.async_save=false")
    reference = run_ranks(_train, 2, args=(str(tmp_path / "reference"), None, None), timeout=120)
    run = tmp_path / "run"
    with SnapshotKeeper(JobToken("test-job", "the test"), capacity=16 << 20) as keeper:
        _killed(run, keeper.address, 8, *disk)
        assert keeper.newest == 6
        finished = run_ranks(_train, 2, args=(str(run), keeper.address, None, *disk), timeout=120)
    for rank in range(2):
        weights, (restored, _, _) = finished[rank]
        assert restored is None, f"rank {rank} resumed from the keeper's step {restored}, not the disk's 8"
        for name, value in reference[rank][0].items():
            assert torch.equal(torch.from_numpy(weights[name]), torch.from_numpy(value)), f"rank {rank} {name}"
    assert "resumed from step 8" in (run / "logs" / "rank_0.log").read_text()


@pytest.mark.multiprocess
def test_a_keeper_without_room_refuses_every_push_and_training_goes_on(tmp_path):
    with SnapshotKeeper(JobToken("test-job", "the test"), capacity=1000) as keeper:  # far below one snapshot
        finished = run_ranks(_train, 2, args=(str(tmp_path / "run"), keeper.address, None), timeout=120)
        assert keeper.newest is None and keeper.held_bytes == 0
    assert [pushed for _, (_, pushed, _) in finished] == [[], []]


@pytest.mark.multiprocess
@pytest.mark.parametrize("layout", ["ddp", "fsdp"])
def test_a_node_lost_with_its_keeper_resumes_from_the_other_nodes_copy_bitwise(tmp_path, layout):
    """Two nodes of one rank each, each with its own keeper (two launchers' keepers, two tokens;
    ``training/snapshot_ring.py``). Both ranks are killed after step 7; then one node comes back
    as a new host would, its keeper empty: DDP loses rank 0's node (before the ring, the only
    node holding the replicated state), FSDP rank 1's (its shards exist only in its part). The
    restarted rank on the new node fetches its part over TCP from the surviving node's keeper
    (``peer``), the other maps its own; no checkpoint file is read and the weights end equal
    to the uninterrupted 2-rank run's exactly."""
    extra = ("parallel.dp_shard=2",) if layout == "fsdp" else ()
    lost = 0 if layout == "ddp" else 1
    reference = run_ranks(_train, 2, args=(str(tmp_path / "reference"), None, None, *extra), timeout=120)
    run = tmp_path / "run"
    tokens = [JobToken(f"node-{n}-keeper", "the test") for n in range(2)]
    keepers = [SnapshotKeeper(token, capacity=16 << 20).start() for token in tokens]
    try:
        _killed(run, [k.address for k in keepers], 7, *extra)
        assert [k.newest for k in keepers] == [6, 6]
        assert not list((run / "checkpoints").glob("step_*"))
        keepers[lost].close()  # the host is gone with its keeper; its replacement starts an empty one
        keepers[lost] = SnapshotKeeper(JobToken("new-host-keeper", "the test"), capacity=16 << 20).start()
        finished = run_ranks(_train, 2, args=(str(run), [k.address for k in keepers], None, *extra), timeout=120)
        assert [k.newest for k in keepers] == [18, 18]  # both nodes hold a copy again
    finally:
        for keeper in keepers:
            keeper.close()
    for rank in range(2):
        weights, (restored, _, fetched) = finished[rank]
        assert restored == 6, f"rank {rank} resumed from {restored}, not step 6"
        assert fetched == ("peer" if rank == lost else "mapped"), f"rank {rank} fetched its part as {fetched}"
        for name, value in reference[rank][0].items():
            assert torch.equal(torch.from_numpy(weights[name]), torch.from_numpy(value)), f"rank {rank} {name}"
    assert "start: world 2, step 6 (resumed from step 6)" in (run / "logs" / "rank_0.log").read_text()
