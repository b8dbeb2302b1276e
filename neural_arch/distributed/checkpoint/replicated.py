"""Checkpoints of replicated (DDP) state: rank 0 writes one verified ``state.pt`` per step,
every rank can load, the last few are kept.

Run (any world size; every rank calls the same line with the same step)::

    save_checkpoint("run/checkpoints", step, {"model": model.state_dict(), ...}, metric=val_loss)
    found = load_checkpoint("run/checkpoints")  # None on a fresh run
    if found is not None:
        info, state = found

A step directory appears only complete (staged under ``.tmp-*``, fsynced, manifest last,
then renamed; see ``layout.py`` for the files), and ``load_checkpoint`` checks size and
sha256 before unpickling (and unpickles nothing that could run code: ``untrusted.py``),
falling back to the previous checkpoint with a ``RuntimeWarning`` when the newest one is
damaged or refused. Ranks must share one filesystem (one node, or NFS/Lustre/GPFS).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional, Union

import torch

from neural_arch.distributed.checkpoint.errors import CheckpointError, DamagedCheckpoint, why_write_failed
from neural_arch.distributed.checkpoint.layout import (
    MANIFEST,
    POINTERS,
    STATE_FILE,
    STEP_DIR,
    CheckpointInfo,
    PathLike,
    pointer_target,
    previous_note,
    prune,
    read_manifest,
    set_manifest_metric,
    step_dirs,
    step_name,
    update_pointers,
    verified_manifest,
    write_manifest,
)
from neural_arch.distributed.checkpoint.loadable import check_loadable
from neural_arch.distributed.checkpoint.progress import checkpoint_saved
from neural_arch.distributed.checkpoint.rank0 import on_rank0
from neural_arch.distributed.checkpoint.shards import SHARDS, has_shards, stage_shards
from neural_arch.distributed.checkpoint.untrusted import read_dcp_metadata, safe_torch_load
from neural_arch.distributed.runtime.guard import require_process_group
from neural_arch.utils.atomic import commit_dir, fsync_dir, make_tmp_dir, remove, write_file

__all__ = ["list_checkpoints", "load_checkpoint", "record_metric", "save_checkpoint"]


def save_checkpoint(
    directory: PathLike,
    step: int,
    state: dict[str, Any],
    *,
    keep_last: int = 3,
    metric: Optional[float] = None,
    lower_is_better: bool = True,
    shards: Optional[dict[str, Any]] = None,
) -> Optional[CheckpointInfo]:
    """Write ``state`` as ``directory/step_{step:08d}``; call on every rank with the same step.

    Only global rank 0 writes (DDP state is identical everywhere). Every rank returns the
    same ``CheckpointInfo`` once the checkpoint is complete on disk, or raises the same
    ``CheckpointError``; in that case earlier checkpoints and pointers are untouched.
    Afterwards only the newest ``keep_last`` step directories and the ``last``/``best``
    targets are kept (``best``: the best ``metric`` so far, lower or higher per
    ``lower_is_better``).

    ``shards``: a state dict of (DTensor-)sharded tensors that every rank saves its own part
    of with DCP, into ``shards/`` of the same step directory (``shards.py``); ``state`` then
    holds the rest (small, replicated). The manifest covers every file, so a damaged shard
    makes the whole step unusable and loading falls back to the previous one.
    """
    require_process_group("save_checkpoint")  # else every rank would write, racing, as "rank 0"
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step={step!r} must be a non-negative int (the training step).")
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last={keep_last!r} must be an int >= 1 (how many step directories to keep).")
    if not isinstance(state, dict):
        raise ValueError(f"state must be a dict (e.g. {{'model': model.state_dict()}}), got {type(state).__name__}.")
    value = None if metric is None else float(metric)
    failed = f"could not write checkpoint step {step} to {directory}"
    staged = None if shards is None else stage_shards(Path(directory), step_name(step), shards, failed)
    info = on_rank0(
        lambda: commit_checkpoint(Path(directory), step, state, keep_last, value, lower_is_better, staged), failed
    )
    if info is not None:
        checkpoint_saved(info.path)
    return info


def record_metric(directory: PathLike, step: int, metric: float, *, lower_is_better: bool = True) -> None:
    """Set the metric of the already saved step ``step`` and move ``best`` if it is now the best.

    For a checkpoint saved before its metric was known (the trainer commits the last step,
    then validates it, so a failure during validation loses no training). Call on every rank
    with the same values; rank 0 writes, and every rank raises the same ``CheckpointError`` if
    the step directory is missing or damaged. The checkpoint's files are not touched. A ``best``
    moved away from an old step releases it: pruned with the save's ``keep_last``, so at most
    ``keep_last`` steps plus ``best`` stay.
    """
    require_process_group("record_metric")
    where = Path(directory)

    def write() -> None:
        step_dir = where / step_name(step)
        try:
            keep_last = set_manifest_metric(step_dir, float(metric)).get("keep_last")
        except DamagedCheckpoint as exc:
            raise CheckpointError(f"cannot record the metric of checkpoint {step_dir}: {exc}") from None
        update_pointers(where, step_dir.name, float(metric), lower_is_better)
        if type(keep_last) is int and keep_last >= 1:  # absent from checkpoints older than the key
            prune(where, keep_last, stale=False)  # a save may be staging under .tmp-* now

    on_rank0(write, f"could not record the metric of checkpoint step {step} in {where}")


def load_checkpoint(
    path: PathLike, *, map_location: Union[str, torch.device] = "cpu", before: Optional[int] = None
) -> Optional[tuple[CheckpointInfo, dict[str, Any]]]:
    """The newest usable checkpoint under ``path`` (a run's checkpoint dir) or ``path`` itself
    (a step dir, or the ``last``/``best`` pointer of one: link or old-style text file).

    Each rank reads on its own (no collectives). A damaged checkpoint in a run directory
    warns and falls back to the next older one; ``None`` means there is no checkpoint yet.
    Raises ``CheckpointError`` when a given step directory, or every candidate, is unusable.
    ``before``: only steps older than this one (the trainer's fallback past a checkpoint that
    loads but does not fit the model).
    """
    path = Path(path)
    if path.name in POINTERS:
        path = pointer_target(path.parent, path.name) or path  # report the step directory, not "last"
    if path.is_dir() and (STEP_DIR.fullmatch(path.name) or (path / MANIFEST).exists()):
        try:
            return _load_one(path, map_location)
        except DamagedCheckpoint as exc:
            raise CheckpointError(
                f"checkpoint {path} is unusable ({exc}); pass the run's checkpoint directory "
                f"{path.parent} instead to fall back to an older checkpoint."
            ) from None
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file; pass a run's checkpoint directory or one step_* directory in it.")
    candidates = [p for step, p in reversed(step_dirs(path)) if before is None or step < before]
    reasons = []
    for i, step_dir in enumerate(candidates):
        try:
            return _load_one(step_dir, map_location)
        except DamagedCheckpoint as exc:
            reasons.append(f"{step_dir.name}: {exc}")
            if i + 1 < len(candidates):
                warnings.warn(
                    f"checkpoint {step_dir} is unusable ({exc}); falling back to the previous one",
                    RuntimeWarning,
                    stacklevel=2,
                )
    if not candidates:
        return None
    raise CheckpointError(
        f"none of the {len(candidates)} checkpoints in {path} is usable ({'; '.join(reasons)}); restore "
        "one from a backup, or move the directory away to start from scratch."
    )


def list_checkpoints(directory: PathLike) -> list[CheckpointInfo]:
    """Every step directory under ``directory``, sorted by step, usable or not (nothing is verified)."""
    infos = []
    for step, step_dir in step_dirs(Path(directory)):
        try:
            metric = read_manifest(step_dir)["metric"]
        except DamagedCheckpoint:
            metric = None
        infos.append(CheckpointInfo(path=step_dir, step=step, metric=metric))
    return infos


def commit_checkpoint(
    directory: Path,
    step: int,
    state: dict[str, Any],
    keep_last: int,
    metric: Optional[float],
    lower_is_better: bool,
    staged: Optional[Path] = None,
) -> CheckpointInfo:
    """Rank 0's part of a save: ``state`` (and the shards already in ``staged``) committed as
    ``directory/step_*``, pointers moved, old steps pruned; ``CheckpointError`` if it failed."""
    name = step_name(step)
    _commit_step_dir(directory, name, step, state, metric, staged, keep_last)
    try:
        update_pointers(directory, name, metric, lower_is_better)
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint step {step} was saved to {directory / name}, but the last/best pointers could not be "
            f"updated ({exc}); load_checkpoint does not need them. Fix the disk problem and save again."
        ) from exc
    prune(directory, keep_last)
    return CheckpointInfo(path=directory / name, step=step, metric=metric)


def _commit_step_dir(
    directory: Path,
    name: str,
    step: int,
    state: dict[str, Any],
    metric: Optional[float],
    staged: Optional[Path] = None,
    keep_last: Optional[int] = None,
) -> None:
    """Stage ``state`` and its manifest under ``.tmp-*`` (``staged``: already holding the shards)
    and rename it to ``directory/name``; on failure nothing but the staging directory was
    touched, and it is removed."""
    tmp: Optional[Path] = staged
    try:
        check_loadable(state)
        tmp = tmp or make_tmp_dir(directory, name)
        write_file(tmp / STATE_FILE, lambda f: torch.save(state, f))
        write_manifest(tmp, step, metric, keep_last)
        fsync_dir(tmp)
        commit_dir(tmp, directory / name)
    except Exception as exc:
        remove(tmp)
        raise CheckpointError(
            f"could not write checkpoint step {step} to {directory}: {why_write_failed(exc, directory)}; "
            f"{previous_note(directory)}"
        ) from exc


def _load_one(step_dir: Path, map_location: Union[str, torch.device]) -> tuple[CheckpointInfo, dict[str, Any]]:
    manifest = verified_manifest(step_dir)  # sizes and sha256 first: nothing is unpickled from a changed file
    try:
        state = safe_torch_load(step_dir / STATE_FILE, map_location=map_location)
        if has_shards(state):  # refuse a planted pickle here, where loading can still fall back
            read_dcp_metadata(step_dir / SHARDS)
    except CheckpointError as exc:  # refused as unsafe, or not DCP metadata: one line naming the file
        raise DamagedCheckpoint(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - any unpickling failure makes it unusable
        raise DamagedCheckpoint(f"could not be read: {' '.join(str(exc).split())}") from None
    return CheckpointInfo(path=step_dir, step=manifest["step"], metric=manifest["metric"]), state
