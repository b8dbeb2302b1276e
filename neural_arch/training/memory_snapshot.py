"""Snapshots of the training state in a keeper's memory every K steps, and a run resumed from them.

Use (every rank; ``address`` names the node's keeper, ``distributed/checkpoint/memory_keeper.py``)::

    snapshots = MemorySnapshots(KeeperClient(address), every=3)
    train(cfg, callbacks=[snapshots])   # resumes from the keeper's newest complete step, else from disk

What a snapshot holds is exactly what a disk checkpoint holds: ``TrainingComponents.checkpoint_state()``
(weights, optimizer, schedule, scaler, sampler position, step, every rank's RNG), and it is
restored by the same ``TrainingComponents.restore`` the disk resume calls, after the same
allowlisting unpickler (``safe_torch_load``): what makes the disk resume exact makes this one exact.

Capture: at a due step every rank takes part in ``checkpoint_state()`` (it gathers the RNGs) and
agrees on the room (``StagingRoom``, one gather, as ``CheckpointWriter`` does); rank 0 copies the
state with the asynchronous save's ``staged_copy`` (the only stall: the same copy an
asynchronous save makes) and a thread serializes it straight into the keeper's connection in
``CHUNK``-byte frames, so the worker holds the copy plus one frame, never a serialized whole.
Where any rank lacks the room, nobody copies that step and rank 0 says so in one line, once. A
push the keeper refuses (too big, unreachable) is said in one line and training goes on: the
disk checkpoint stays the fallback.

Sharded state (``checkpoint.format: sharded``: FSDP, tensor and pipeline parallel): every rank
pushes its own part (its shards as local tensors, ``snapshot_parts.py``, plus the small state)
and restores its own part into the new layout's shards; exact on the same world size and mesh,
which is what a restart inside one launcher gives. Any other layout is refused in one line and
the run resumes from disk (DCP reshards).

Several nodes (``snapshot_ring.py``): every part is pushed to its node's keeper and the next
node's (a replicated state by rank 0, a sharded one by every rank), so a lost host's
replacement, or the survivors of an elastic job, find every part on a live node: a rank whose
own keeper lacks its part fetches it from another node's over the network (``fetched``:
``peer``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, Optional, cast

import neural_arch.distributed as nd
from neural_arch.distributed.checkpoint.background import staged_copy
from neural_arch.distributed.checkpoint.keeper_file import keeper_address
from neural_arch.distributed.checkpoint.keeper_protocol import HeldStep, KeeperAddress, KeeperClient, KeeperError
from neural_arch.distributed.checkpoint.layout import step_dirs
from neural_arch.distributed.checkpoint.staging_room import StagingRoom, copy_bytes
from neural_arch.distributed.checkpoint.untrusted import safe_torch_load
from neural_arch.distributed.launcher.channel import PROGRESS, tell
from neural_arch.training.callbacks import Callback, FinishEvent, StepEvent
from neural_arch.training.components import TrainingComponents
from neural_arch.training.snapshot_parts import PartMismatch, fill_part, local_part
from neural_arch.training.snapshot_ring import SnapshotRing
from neural_arch.training.snapshot_stream import Reader, serialized

Target = tuple[KeeperAddress, Optional[frozenset[int]]]
"""A keeper a rank pushes its part to, and the parts that keeper holds (``SnapshotRing.targets``)."""
REPLICATED_PART = 0
"""A replicated (DDP) state is one part, each node's lowest rank's: every rank's copy is the same (RNGs gathered)."""


class MemorySnapshots(Callback):
    """Pushes the training state to the keeper every ``every`` steps; restores a run from it."""

    def __init__(self, client: KeeperClient, every: int, room: Optional[StagingRoom] = None) -> None:
        if every < 1:
            raise ValueError(f"MemorySnapshots: every must be at least 1, not {every}")
        self.client, self.every = client, every
        self.room = room if room is not None else StagingRoom()
        self.components: Optional[TrainingComponents] = None
        self.pushed: list[int] = []
        """Steps this rank pushed and its node's keeper accepted (a replicated state: rank 0 only)."""
        self.restored: Optional[int] = None
        """The step this run resumed from out of the keeper's memory (None: it did not)."""
        self.fetched: Optional[str] = None
        """How the restored part came: ``mapped`` (this node keeper's file, no copy), ``bytes`` (its
        bytes over the connection) or ``peer`` (from another node's keeper over the network)."""
        self.source: Optional[str] = None
        """The snapshot restored and the keeper it came from (``memory snapshot step S at HOST:PORT``)."""
        self.ring: Optional[SnapshotRing] = None
        """Every rank's keeper and what each held when this attempt began (restore_training)."""
        self._thread: Optional[threading.Thread] = None
        self._said: set[str] = set()

    @classmethod
    def for_worker(cls, every: int) -> Optional[MemorySnapshots]:
        """Snapshots to the keeper this worker's launcher agent named (keeper_file.py); None without one."""
        address = keeper_address()
        return None if address is None else cls(KeeperClient(address), every)

    @classmethod
    def for_run(cls, every: int) -> list[Callback]:
        """The trainer's (``checkpoint.memory_every``): ``[MemorySnapshots]`` where this worker's
        launcher runs a keeper, else ``[]`` with one note from rank 0 (e.g. a worker of torchrun's)."""
        snapshots = cls.for_worker(every) if every > 0 else None
        if every > 0 and snapshots is None and nd.detect_cluster_env().rank == 0:
            print(
                f"note: checkpoint.memory_every={every}, but no snapshot keeper was found (only neural-arch's "
                "launcher runs one: `neural-arch train --nproc-per-node N` or `neural-arch launch`); "
                "no memory snapshots, a restart resumes from disk",
                flush=True,
            )
        return [] if snapshots is None else [snapshots]

    def restore_training(self, components: TrainingComponents, allowed: bool = True) -> Optional[int]:
        """Restore the keeper's newest complete step into ``components`` (every rank; collective);
        the step, or None when the keeper holds none (the run then resumes from disk or anew).
        ``allowed=False`` (``--resume`` none or a path): snapshot from now on, restore nothing."""
        self.components = components
        self.ring = SnapshotRing.gather(self.client.address, self._held())
        if not allowed:
            return None
        chosen = self._newest(components, self._parts(components)) if nd.get_rank() == 0 else None
        step = cast(Optional[int], nd.all_gather_object(chosen)[0])
        if step is None:  # rank 0's answer: every rank restores the same step, or none does
            return None
        where = f"memory snapshot step {step}"
        state: Any = None
        why: Optional[str] = None
        try:
            state = self._fetch(step, nd.get_rank() if components.sharded_checkpoints else REPLICATED_PART, where)
        except (KeeperError, OSError, ValueError) as exc:  # e.g. the peer that held it died meanwhile
            why = f"rank {nd.get_rank()}: {exc}"
        failed = _first(why)
        if failed is not None:  # every rank goes to the disk together, or none does
            self._say("resume", f"no memory snapshot to resume from ({failed}); resuming from disk")
            return None
        try:
            if components.sharded_checkpoints:  # this rank's own shards, copied into the new layout's
                components.restore(state["state"], components.cfg.run.seed, fill=_agreed_fill(state["shards"]))
            else:
                components.restore(state, components.cfg.run.seed)
        except PartMismatch as exc:  # raised on every rank before anything was changed
            self._say("resume", f"the memory snapshot does not fit this layout ({exc}); resuming from disk")
            return None
        if nd.get_rank() == 0:
            print(f"resuming from step {step} of {components.cfg.training.steps} ({self.source})", flush=True)
        self.restored = step
        return self.restored

    def _fetch(self, step: int, part: int, where: str) -> Any:
        """The part's state, mapped from this node keeper's own memory file where this host can
        open it (no copy: the weights are copied into place by the restore, the optimizer's state
        stays a copy-on-write view), else loaded from its bytes over the connection, or from
        another node's keeper where this node's lacks it. KeeperError: none of these."""
        assert self.ring is not None
        own, address = self.ring.source(step, part, self._parts(self.components))
        if address is None:
            raise KeeperError(f"no keeper holds step {step} part {part}")
        if not own:
            data = KeeperClient(address).get(step, part)
            self.fetched, self.source = "peer", f"{where} at {address.where}"
            # every such rank says it: the only traffic between nodes a restore makes
            print(
                f"rank {nd.get_rank()}: part {part} of {self.source}, another node's keeper ({len(data)} bytes)",
                flush=True,
            )
            return safe_torch_load(Reader(data), where=self.source)  # type: ignore[arg-type]
        where = self.source = f"{where} at {self.client.address.where}"
        try:
            fd = self.client.open(step, part)
        except KeeperError:  # no /proc here, or another pid namespace: the bytes instead
            data = self.client.get(step, part)
            self.fetched = "bytes"
            return safe_torch_load(Reader(data), where=where)  # type: ignore[arg-type]
        try:
            self.fetched = "mapped"
            return safe_torch_load(f"/proc/self/fd/{fd}", where=where, mmap=True)
        finally:
            os.close(fd)  # the mapping holds the file from here on

    @staticmethod
    def _parts(components: Optional[TrainingComponents]) -> int:
        """How many parts a snapshot of this run has: one per rank (sharded) or one."""
        return nd.get_world_size() if components is not None and components.sharded_checkpoints else 1

    def _held(self) -> Optional[HeldStep]:
        """What this node's keeper holds complete (None: nothing, or it cannot be asked: said in
        one line by the node's rank that asked, the others go on with the other nodes' keepers)."""
        try:
            return self.client.held()
        except (KeeperError, OSError, ValueError) as exc:
            self._say("keeper", f"this node's snapshot keeper cannot be asked ({exc})", anywhere=True)
            return None

    def _newest(self, components: TrainingComponents, parts: int) -> Optional[int]:
        """The newest step of which the keepers hold every part, unless a disk checkpoint is
        newer (the disk resume then takes it: fewer steps to recompute)."""
        assert self.ring is not None
        newest = self.ring.newest(parts)
        on_disk = step_dirs(Path(components.cfg.run.dir) / "checkpoints")  # names only: the disk resume verifies
        return None if newest is None or (on_disk and on_disk[-1][0] > newest) else newest

    def on_step(self, event: StepEvent) -> None:
        if event.step % self.every == 0 and event.step < event.steps and self.components is not None:
            self.push(self.components)

    def on_finish(self, event: FinishEvent) -> None:
        self.wait()

    def push(self, components: TrainingComponents) -> None:
        """Snapshot ``components`` now (every rank; collective) and send it behind training."""
        self.wait()  # one push in flight: the keeper's footprint counts on it
        sharded = components.sharded_checkpoints
        if self.ring is None:  # pushed without a restore first (collective, as push is)
            self.ring = SnapshotRing.gather(self.client.address, None)
        targets = self.ring.targets(sharded)
        state: dict[str, Any] = components.checkpoint_state()  # collective: every rank's RNG
        if sharded:  # every rank pushes its own shards (a collective: some DTensors are redistributed)
            state = {"state": state, "shards": local_part(components.shard_state())}
        pushes = bool(targets)
        host, device = copy_bytes(state) if pushes else (0, 0)
        reasons = nd.all_gather_object(self.room.shortfall(host, device))
        short = next((f"on rank {r} {why}" for r, why in enumerate(reasons) if why is not None), None)
        if short is not None:
            self._say("room", f"memory snapshot of step {components.step} skipped: {short}; later ones try again")
            return
        if not pushes:
            return
        staged, step = staged_copy(state), components.step
        del state
        part = (nd.get_rank(), nd.get_world_size()) if sharded else (REPLICATED_PART, 1)
        self._thread = threading.Thread(
            target=self._send, args=(step, part, staged, targets), name=f"snapshot-{step}", daemon=True
        )
        self._thread.start()

    def wait(self) -> None:
        """Until the push in flight has been answered (this rank only: no collective)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _send(self, step: int, part: tuple[int, int], staged: object, targets: list[Target]) -> None:
        """Stream ``staged`` to each keeper of ``targets`` in turn (this node's first)."""
        for i, (address, holds) in enumerate(targets):
            client = self.client if i == 0 else KeeperClient(address)
            try:
                client.put(step, part[0], part[1], serialized(staged), holds)
            except (KeeperError, OSError, ValueError) as exc:
                self._say(
                    f"push {address.where}",
                    f"memory snapshot of step {step} not kept at {address.where} ({exc}); the disk checkpoint "
                    "stays the fallback",
                    anywhere=True,
                )
                continue
            if i == 0:
                self.pushed.append(step)
                if self.ring is not None and self.ring.leader:  # progress for the launcher's restart policy
                    tell(PROGRESS, f"step {step} in memory")

    def _say(self, kind: str, line: str, anywhere: bool = False) -> None:
        """``line`` from rank 0 (or this rank: ``anywhere``, for what only it sees, e.g. a push
        refused by another node's keeper), the first time a message of ``kind`` comes up in this run."""
        if kind not in self._said and (anywhere or nd.get_rank() == 0):
            self._said.add(kind)
            print(f"note: {line}", flush=True)


def _first(why: Optional[str]) -> Optional[str]:
    """The first rank's reason among every rank's (a collective), None when no rank has one."""
    return next((cast(str, w) for w in nd.all_gather_object(why) if w is not None), None)


def _agreed_fill(shards: Any) -> Callable[[Any], None]:
    """What copies this rank's snapshot shards into the layout's, once every rank has checked
    that its own fit (``PartMismatch`` on every rank, with the first rank's reason, where any
    does not: nothing is copied anywhere then)."""

    def fill(target: Any) -> None:
        why = None
        try:
            fill_part(target, shards, copy=False)
        except PartMismatch as exc:
            why = f"rank {nd.get_rank()}: {exc}"
        failed = _first(why)
        if failed is not None:
            raise PartMismatch(failed)
        fill_part(target, shards)

    return fill
