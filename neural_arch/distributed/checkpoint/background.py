"""Checkpoints written while training goes on: ``CheckpointWriter(background=True)``.

Use (every rank, the same calls in the same order)::

    writer = CheckpointWriter(background=True)
    writer.save("run/checkpoints", step, state, keep_last=3, shards=shards)  # returns once copied
    ...                                                                      # train on
    writer.wait()   # that step is committed, or every rank raises the same CheckpointError

``save`` copies the state (every tensor, shards included) off the training tensors, then a
thread writes the copies: rank 0 the replicated part, every rank its DCP shards (over a process
group of its own, so the writes never interleave with training's collectives), and rank 0
commits the step directory exactly as ``save_checkpoint`` does (staged under ``.tmp-*``,
manifest last, renamed): a crash mid-write leaves the previous checkpoint intact. At most one
save is in flight: the next ``save`` waits for the last, and so must anything that needs the
step on disk (recording its metric, stopping, the end of the run). ``background=False`` saves
synchronously, as ``save_checkpoint``.

The copy costs as much memory as the state it copies. Before copying, every rank checks that
its copy fits beside training at its peak (``staging_room.py``: the memory cgroup's limit,
``MemAvailable``, CUDA's free memory); where any rank's does not, every rank saves that step
synchronously (no copy: nothing the synchronous save would survive is killed) and rank 0 says
so in one line, once. The trainer's ``checkpoint.async_save: false`` turns copies off for good.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_map

from neural_arch.distributed.checkpoint.errors import CheckpointError, why_write_failed
from neural_arch.distributed.checkpoint.layout import PathLike, previous_note, step_name
from neural_arch.distributed.checkpoint.progress import checkpoint_saved
from neural_arch.distributed.checkpoint.rank0 import on_rank0
from neural_arch.distributed.checkpoint.replicated import commit_checkpoint, save_checkpoint
from neural_arch.distributed.checkpoint.shards import SHARDS
from neural_arch.distributed.checkpoint.staging_room import StagingRoom, copy_bytes
from neural_arch.distributed.runtime.collectives import all_gather_object
from neural_arch.distributed.runtime.gloo_threads import batch_gloo_io_threads
from neural_arch.distributed.runtime.process_group import get_rank
from neural_arch.utils.atomic import make_tmp_dir, remove


class CheckpointWriter:
    """Saves checkpoints, in a background thread when ``background`` (at most one in flight)."""

    def __init__(self, background: bool, room: Optional[StagingRoom] = None) -> None:
        self.background = background
        self.room = room if room is not None else StagingRoom()
        self.noted = False
        """Whether rank 0 has said that a save fell back to synchronous (said once per run)."""
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[str] = None
        self._group: Optional[dist.ProcessGroup] = None

    def save(
        self,
        directory: PathLike,
        step: int,
        state: dict[str, Any],
        *,
        keep_last: int = 3,
        shards: Optional[dict[str, Any]] = None,
    ) -> None:
        """Save ``state`` (and ``shards``) as step ``step``: at once, or copied now and written behind."""
        if not self.background:
            save_checkpoint(directory, step, state, keep_last=keep_last, shards=shards)
            return
        self.wait()
        if self._no_room(step, state, shards):
            save_checkpoint(directory, step, state, keep_last=keep_last, shards=shards)
            return
        where, rank = Path(directory), get_rank()
        failed = f"could not write checkpoint step {step} to {where}"
        staging = None
        if shards is not None:
            staging = where / on_rank0(lambda: make_tmp_dir(where, step_name(step)).name, failed)
            shards = staged_copy(shards)
        replicated = staged_copy(state) if rank == 0 else None  # only rank 0 writes the replicated part
        group = self._writer_group() if shards is not None else None
        self._error = None
        self._thread = threading.Thread(
            target=self._write,
            args=(where, step, replicated, keep_last, shards, staging, group),
            name=f"checkpoint-step-{step}",
            daemon=True,  # a crash must not wait for it: the previous checkpoint stays intact
        )
        self._thread.start()

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def in_flight(self) -> bool:
        """Whether a background save has not been waited for yet (``wait`` commits it)."""
        return self._thread is not None

    @property
    def writing(self) -> bool:
        """Whether this rank's part of the save in flight is still being written (no collective;
        once it is False on every rank, the step is committed and ``wait`` returns at once)."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        """Block until the save in flight is committed (a collective: call on every rank);
        every rank raises the same ``CheckpointError`` if any rank's part failed."""
        if self._thread is None:
            return
        self._thread.join()
        self._thread = None
        errors = [e for e in all_gather_object(self._error) if e is not None]
        if errors:
            raise CheckpointError(errors[0])

    def close(self) -> None:
        """Let the save in flight finish without asking the other ranks (a failing run's exit)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _no_room(self, step: int, state: dict[str, Any], shards: Optional[dict[str, Any]]) -> bool:
        """Whether some rank's copy would not fit (a collective: every rank gets the same answer)."""
        host, device = copy_bytes((shards, state) if get_rank() == 0 else shards)  # rank 0 copies the state too
        reasons = all_gather_object(self.room.shortfall(host, device))
        short = [(rank, why) for rank, why in enumerate(reasons) if why is not None]
        if short and get_rank() == 0 and not self.noted:
            rank, why = short[0]
            print(
                f"note: checkpoint step {step} saved synchronously (training waited for the write): on rank {rank} "
                f"{why}; later saves do the same while memory is short (checkpoint.async_save)",
                flush=True,
            )
            self.noted = True
        return bool(short)

    def _write(
        self,
        directory: Path,
        step: int,
        state: Optional[dict[str, Any]],
        keep_last: int,
        shards: Optional[dict[str, Any]],
        staging: Optional[Path],
        group: Optional[dist.ProcessGroup],
    ) -> None:
        try:
            if shards is not None:
                import torch.distributed.checkpoint as dcp  # here: DCP is slow to import, most runs never need it

                dcp.save(shards, checkpoint_id=staging / SHARDS, process_group=group)
            if state is not None:
                info = commit_checkpoint(directory, step, state, keep_last, None, True, staging)
                checkpoint_saved(info.path)
        except CheckpointError as exc:
            self._error = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported on every rank by wait()
            if get_rank() == 0:
                remove(staging)
            why = why_write_failed(exc, directory)
            self._error = f"could not write checkpoint step {step} to {directory}: {why}; {previous_note(directory)}"

    def _writer_group(self) -> dist.ProcessGroup:
        # A group of its own for the writes (made once, by every rank at the same save).
        if self._group is None:
            self._group = dist.new_group(backend="gloo")
            batch_gloo_io_threads()  # its I/O thread must not preempt training's (gloo_threads.py)
        return self._group


def staged_copy(state: Any) -> Any:
    """``state`` with every tensor copied off the training tensors (DTensors keep their layout); memory
    snapshots stage with it too (training/memory_snapshot.py)."""
    return tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, state)
