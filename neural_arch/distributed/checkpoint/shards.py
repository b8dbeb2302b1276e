"""The DCP part of a sharded checkpoint: every rank's shards, in ``step_*/shards/``.

Use (see ``save_checkpoint(..., shards=...)``)::

    save_checkpoint(dir, step, small_state, shards={"model": sharded_sd, "optim": optim_sd})
    info, state = load_checkpoint(dir)              # verified: manifest covers the shards too
    load_shards(info.path, target)                  # every rank: fill target, on any layout
    whole = read_whole_shards(info.path)            # one process: every tensor in full

Each rank writes only its own parts (no gather on rank 0), DCP reshards on load, so a run
saved on one layout resumes on another. Saving stages the shards in the step's ``.tmp-*``
directory; rank 0 then adds ``state.pt`` and the manifest and renames it, exactly as for a
replicated checkpoint, so a sharded step directory, too, appears complete or not at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neural_arch.distributed.checkpoint.errors import CheckpointError, why_write_failed
from neural_arch.distributed.checkpoint.rank0 import on_rank0
from neural_arch.distributed.checkpoint.sharded import load_sharded
from neural_arch.distributed.runtime.process_group import get_rank
from neural_arch.utils.atomic import make_tmp_dir, remove

SHARDS = "shards"
"""Sub-directory of a step directory holding the DCP files."""


def stage_shards(directory: Path, name: str, shards: dict[str, Any], failed: str) -> Path:
    """Every rank: write its shards into a new staging directory for step ``name``; returns it."""
    import torch.distributed.checkpoint as dcp  # here: DCP is slow to import, most runs never need it

    tmp = directory / on_rank0(lambda: make_tmp_dir(directory, name).name, failed)
    try:
        dcp.save(shards, checkpoint_id=tmp / SHARDS)
    except Exception as exc:  # DCP gathers per-rank failures: every rank gets here together
        if get_rank() == 0:
            remove(tmp)
        raise CheckpointError(f"{failed}: {why_write_failed(exc, directory)}") from exc
    return tmp


def has_shards(state: dict[str, Any]) -> bool:
    """Whether a loaded checkpoint state was saved sharded (its model is in ``shards/``)."""
    return bool(state.get(SHARDS))


def load_shards(step_dir: Path, target: dict[str, Any]) -> None:
    """Every rank: fill ``target`` (tensors/DTensors in this run's layout) from ``step_dir``'s shards."""
    load_sharded(step_dir / SHARDS, target)


def read_whole_shards(step_dir: Path) -> dict[str, Any]:
    """One process, no process group: the shards' whole state (full tensors, nested as saved).

    Read without running anything from the files (``dcp_reader.py``); a planted pickle raises
    ``UnsafeCheckpoint``. ``load_checkpoint`` has already checked the shards against the manifest.
    """
    from neural_arch.distributed.checkpoint.dcp_reader import read_whole_dcp  # DCP: slow import

    try:
        return read_whole_dcp(step_dir / SHARDS)
    except CheckpointError:  # already one line naming the file
        raise
    except Exception as exc:  # noqa: BLE001 - any failure makes the checkpoint unreadable here
        raise CheckpointError(f"could not read the shards of {step_dir}: {exc}") from exc


def with_whole_model(step_dir: Path, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with its ``"model"`` in full, read from the shards if it was saved sharded
    (for one-process readers: export, generate)."""
    if not has_shards(state):
        return state
    return {**state, "model": read_whole_shards(step_dir)["model"]}
