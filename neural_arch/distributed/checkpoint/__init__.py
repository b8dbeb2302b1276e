"""Atomic, verified checkpoints: ``save_checkpoint`` / ``load_checkpoint`` for replicated
(DDP) state, ``save_sharded`` / ``load_sharded`` for DTensor/FSDP state.

Use (every rank calls the same line with the same step)::

    from neural_arch.distributed.checkpoint import load_checkpoint, save_checkpoint
    save_checkpoint("run/checkpoints", step, {"model": model.state_dict()}, metric=val_loss)
    found = load_checkpoint("run/checkpoints")  # None on a fresh run, else (info, state)

Concern: nothing a user trained is lost to a crash. Files: ``replicated.py`` (save, load
with fallback, list), ``sharded.py`` (DCP, loadable at another world size), ``layout.py``
(step directories, manifest, ``last``/``best`` pointers, pruning), ``rank0.py`` (rank 0
writes, every rank learns the outcome), ``loadable.py`` (refuse state that could not be
loaded back), ``progress.py`` (tell the launcher a save succeeded), ``untrusted.py`` and ``dcp_reader.py`` (load
without running code from the files: allowlisting unpicklers), ``errors.py``. Every write goes
through ``neural_arch.utils.atomic``. ``memory_keeper.py``, ``keeper_protocol.py`` and
``keeper_file.py``: snapshots held in the launcher agent's memory (training/memory_snapshot.py
pushes and restores them; issue 36, first piece).
"""

from neural_arch.distributed.checkpoint.background import CheckpointWriter
from neural_arch.distributed.checkpoint.errors import CheckpointError, UnsafeCheckpoint
from neural_arch.distributed.checkpoint.layout import CheckpointInfo
from neural_arch.distributed.checkpoint.replicated import (
    list_checkpoints,
    load_checkpoint,
    record_metric,
    save_checkpoint,
)
from neural_arch.distributed.checkpoint.sharded import load_sharded, save_sharded
from neural_arch.distributed.checkpoint.shards import has_shards, load_shards, read_whole_shards, with_whole_model

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointWriter",
    "has_shards",
    "list_checkpoints",
    "load_checkpoint",
    "load_sharded",
    "load_shards",
    "read_whole_shards",
    "record_metric",
    "save_checkpoint",
    "save_sharded",
    "UnsafeCheckpoint",
    "with_whole_model",
]
