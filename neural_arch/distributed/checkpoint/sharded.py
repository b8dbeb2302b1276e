"""Sharded (DTensor/FSDP) checkpoints through ``torch.distributed.checkpoint`` (DCP).

Run (every rank calls the same line; world size 1 works without a process group)::

    save_sharded("run/sharded/step_00000020", {"model": model.state_dict()})
    state = {"model": model.state_dict()}  # tensors/DTensors already in the target layout
    load_sharded("run/sharded/step_00000020", state)  # fills ``state`` in place

Each rank writes its own shards into one ``.tmp-*`` sibling directory; rank 0 renames it
into place once all are written, so the directory appears complete or not at all. A
directory saved at one world size can be loaded at another (DCP reshards). Ranks must
share one filesystem. Plain (non-sharded) state goes through ``save_checkpoint`` instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from neural_arch.distributed.checkpoint.errors import CheckpointError, UnsafeCheckpoint, why_write_failed
from neural_arch.distributed.checkpoint.layout import PathLike
from neural_arch.distributed.checkpoint.progress import checkpoint_saved
from neural_arch.distributed.checkpoint.quiet import quiet_single_process
from neural_arch.distributed.checkpoint.rank0 import on_rank0
from neural_arch.distributed.checkpoint.untrusted import METADATA, read_dcp_metadata
from neural_arch.distributed.runtime.collectives import all_gather_object
from neural_arch.distributed.runtime.process_group import get_rank, is_initialized
from neural_arch.utils.atomic import commit_dir, make_tmp_dir, remove


def save_sharded(directory: PathLike, state_dict: dict[str, Any]) -> None:
    """Save (possibly DTensor-sharded) ``state_dict`` with DCP into ``directory``; call on every rank.

    Ranks write their shards into one temporary sibling directory, whose name rank 0 picks
    and shares; rank 0 renames it to ``directory`` when all shards are written. An existing
    ``directory`` is replaced. Works without a process group (world size 1).
    """
    import torch.distributed.checkpoint as dcp  # here: DCP is slow to import, most runs never shard

    final = Path(directory)
    failed = f"could not write sharded checkpoint {final}"
    tmp = final.parent / on_rank0(lambda: make_tmp_dir(final.parent, final.name).name, failed)
    try:
        with quiet_single_process():
            dcp.save(state_dict, checkpoint_id=tmp, no_dist=not is_initialized())
    except Exception as exc:
        # DCP gathers per-rank failures, so every rank gets here together.
        if get_rank() == 0:
            remove(tmp)
        raise CheckpointError(f"{failed}: {why_write_failed(exc, final)}") from exc
    on_rank0(lambda: commit_dir(tmp, final), failed)
    checkpoint_saved(final)


def load_sharded(directory: PathLike, state_dict: dict[str, Any]) -> None:
    """Load ``directory`` (written by ``save_sharded`` at any world size) into ``state_dict`` in place.

    Call on every rank, with tensors/DTensors already allocated in the target shapes and layouts.
    Nothing in the files runs: the metadata and every non-tensor entry are read with
    allowlisting unpicklers (``dcp_reader.py``), and a refused file raises ``UnsafeCheckpoint``.
    """
    from neural_arch.distributed.checkpoint.dcp_reader import load_dcp  # here: DCP is slow to import

    path = Path(directory)
    problems = all_gather_object(_metadata_problem(path))  # why: a rank raising alone would hang the rest
    missing = [rank for rank, problem in enumerate(problems) if problem == ("missing", "")]
    if missing:
        raise CheckpointError(
            f"no sharded checkpoint at {path} (no {METADATA} file) as seen by rank(s) {missing}; pass the "
            "directory save_sharded wrote, on a filesystem every rank can read."
        )
    for kind, message in filter(None, problems):
        raise UnsafeCheckpoint(message) if kind == "unsafe" else CheckpointError(message)
    try:
        load_dcp(state_dict, path, no_dist=not is_initialized())
    except CheckpointError:  # already one line, naming the directory
        raise
    except Exception as exc:
        raise CheckpointError(f"could not load sharded checkpoint {path}: {exc}") from exc


def _metadata_problem(path: Path) -> Optional[tuple[str, str]]:
    """``(kind, message)`` if ``path``'s DCP metadata cannot be used here (kind: missing, unsafe,
    damaged), else None; read with the allowlisting unpickler before DCP touches the directory."""
    try:
        read_dcp_metadata(path)
    except FileNotFoundError:
        return ("missing", "")
    except OSError as exc:
        return ("damaged", f"{path / METADATA} cannot be read: {exc}")
    except UnsafeCheckpoint as exc:
        return ("unsafe", str(exc))
    except CheckpointError as exc:
        return ("damaged", str(exc))
    return None
