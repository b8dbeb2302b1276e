"""Atomic, verified checkpoints: rank 0 writes, every rank can load, the last few are kept.

Run (any world size; every rank calls the same line with the same step)::

    save_checkpoint("run/checkpoints", step, {"model": model.state_dict(), ...}, metric=val_loss)
    found = load_checkpoint("run/checkpoints")  # None on a fresh run
    if found is not None:
        info, state = found

Layout: ``run/checkpoints/step_00000020/{state.pt,manifest.json}`` plus the text files
``last`` and ``best`` naming a step directory. A step directory appears only complete
(written under ``.tmp-*``, fsynced, manifest last, then renamed), and ``load_checkpoint``
checks size and sha256 before unpickling, falling back to the previous checkpoint with a
``RuntimeWarning`` when the newest one is damaged. ``save_sharded``/``load_sharded`` (in
sharded.py, re-exported here) go through ``torch.distributed.checkpoint`` (DCP) for
DTensor/FSDP state, which can be loaded at a different world size. The fsync/rename
helpers live in atomic_files.py, the directory layout and rank-0 protocol in
checkpoint_base.py. Ranks must share one filesystem (one node, or NFS/Lustre/GPFS).
"""

from __future__ import annotations

import json
import os
import warnings
from collections import OrderedDict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Union

import torch

from neural_arch.distributed.atomic_files import commit_dir, fsync_dir, make_tmp_dir, remove, sha256, tmp_path, write_file
from neural_arch.distributed.checkpoint_base import (
    FORMAT, MANIFEST, POINTERS, STATE_FILE, STEP_DIR, CheckpointError, CheckpointInfo, PathLike, Unusable,
    best_name, on_rank0, previous_note, prune, read_manifest, step_dirs,
)
from neural_arch.distributed.sharded import load_sharded, save_sharded

__all__ = ["CheckpointError", "CheckpointInfo", "list_checkpoints", "load_checkpoint", "load_sharded",
           "save_checkpoint", "save_sharded"]

# What torch.load(weights_only=True) rebuilds (checked against torch 2.13). Exact types on
# purpose: numpy.float64 is a float subclass, but unpickling it needs numpy and fails.
_LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray, torch.Tensor,
           torch.nn.Parameter, torch.Size, torch.dtype, torch.device, torch.layout)
_CONTAINERS = (dict, OrderedDict, list, tuple, set)


def save_checkpoint(
    directory: PathLike, step: int, state: dict[str, Any], *, keep_last: int = 3,
    metric: Optional[float] = None, lower_is_better: bool = True,
) -> Optional[CheckpointInfo]:
    """Write ``state`` as ``directory/step_{step:08d}``; call on every rank with the same step.

    Only global rank 0 writes (DDP state is identical everywhere). Every rank returns the
    same ``CheckpointInfo`` once the checkpoint is complete on disk, or raises the same
    ``CheckpointError``; in that case earlier checkpoints and pointers are untouched.
    Afterwards only the newest ``keep_last`` step directories and the ``last``/``best``
    targets are kept (``best``: the best ``metric`` so far, lower or higher per
    ``lower_is_better``).
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step={step!r} must be a non-negative int (the training step).")
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last={keep_last!r} must be an int >= 1 (how many step directories to keep).")
    if not isinstance(state, dict):
        raise ValueError(f"state must be a dict (e.g. {{'model': model.state_dict()}}), got {type(state).__name__}.")
    value = None if metric is None else float(metric)
    return on_rank0(lambda: _write_checkpoint(Path(directory), step, state, keep_last, value, lower_is_better),
                     f"could not write checkpoint step {step} to {directory}")


def load_checkpoint(
    path: PathLike, *, map_location: Union[str, torch.device] = "cpu"
) -> Optional[tuple[CheckpointInfo, dict[str, Any]]]:
    """The newest usable checkpoint under ``path`` (a run's checkpoint dir) or ``path`` itself (a step dir).

    Each rank reads on its own (no collectives). A damaged checkpoint in a run directory
    warns and falls back to the next older one; ``None`` means there is no checkpoint yet.
    Raises ``CheckpointError`` when a given step directory, or every candidate, is unusable.
    """
    path = Path(path)
    if path.is_dir() and (STEP_DIR.fullmatch(path.name) or (path / MANIFEST).exists()):
        try:
            return _load_one(path, map_location)
        except Unusable as exc:
            raise CheckpointError(
                f"checkpoint {path} is unusable ({exc}); pass the run's checkpoint directory "
                f"{path.parent} instead to fall back to an older checkpoint."
            ) from None
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file; pass a run's checkpoint directory or one step_* directory in it.")
    candidates = [p for _, p in reversed(step_dirs(path))]
    reasons = []
    for i, step_dir in enumerate(candidates):
        try:
            return _load_one(step_dir, map_location)
        except Unusable as exc:
            reasons.append(f"{step_dir.name}: {exc}")
            if i + 1 < len(candidates):
                warnings.warn(f"checkpoint {step_dir} is unusable ({exc}); falling back to the previous one",
                              RuntimeWarning, stacklevel=2)
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
        except Unusable:
            metric = None
        infos.append(CheckpointInfo(path=step_dir, step=step, metric=metric))
    return infos


def _write_checkpoint(
    directory: Path, step: int, state: dict[str, Any], keep_last: int, metric: Optional[float], lower_is_better: bool
) -> CheckpointInfo:
    name = f"step_{step:08d}"
    staged: dict[str, Path] = {}  # what to remove if anything fails before the commit
    try:
        _check_loadable(state, "state", set())
        tmp = staged["dir"] = make_tmp_dir(directory, name)
        write_file(tmp / STATE_FILE, lambda f: torch.save(state, f))
        entry = {"sha256": sha256(tmp / STATE_FILE), "bytes": (tmp / STATE_FILE).stat().st_size}
        manifest = {"format": FORMAT, "step": step, "metric": metric, "files": {STATE_FILE: entry},
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        write_file(tmp / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=2).encode()))
        fsync_dir(tmp)
        # Pointers are written now too, so that after the commit only renames remain.
        for pointer, target in (("last", name), ("best", best_name(directory, name, metric, lower_is_better))):
            if target is not None:
                staged[pointer] = tmp_path(directory, pointer)
                write_file(staged[pointer], lambda f, t=target: f.write(f"{t}\n".encode()))
        commit_dir(tmp, directory / name)
    except Exception as exc:
        for leftover in staged.values():
            remove(leftover)
        raise CheckpointError(
            f"could not write checkpoint step {step} to {directory}: {exc}; {previous_note(directory)}"
        ) from exc
    try:
        for pointer in POINTERS:
            if pointer in staged:
                os.replace(staged[pointer], directory / pointer)
        fsync_dir(directory)
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint step {step} was saved to {directory / name}, but the last/best pointers could not be "
            f"updated ({exc}); load_checkpoint does not need them. Fix the disk problem and save again."
        ) from exc
    prune(directory, keep_last)
    return CheckpointInfo(path=directory / name, step=step, metric=metric)


def _load_one(step_dir: Path, map_location: Union[str, torch.device]) -> tuple[CheckpointInfo, dict[str, Any]]:
    manifest = read_manifest(step_dir)
    entry = manifest["files"][STATE_FILE]
    file = step_dir / STATE_FILE
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise Unusable(f"{STATE_FILE} cannot be read: {exc}") from None
    if size != entry["bytes"]:
        raise Unusable(f"{STATE_FILE} has {size} bytes, the manifest says {entry['bytes']}; it was truncated or overwritten")
    if sha256(file) != entry["sha256"]:
        raise Unusable(f"{STATE_FILE} does not match the sha256 in its manifest; the file is corrupt")
    try:
        state = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure makes it unusable
        raise Unusable(f"torch.load failed: {exc}") from None
    return CheckpointInfo(path=step_dir, step=manifest["step"], metric=manifest["metric"]), state


def _check_loadable(value: Any, where: str, on_path: set[int]) -> None:
    """Raise naming the first value torch.load(weights_only=True) could not rebuild.

    Why walk instead of a trial load: it names the key, and costs no second copy of the state.
    """
    kind = type(value)
    if kind in _LEAVES or kind in torch.serialization.get_safe_globals():
        return
    if kind not in _CONTAINERS:
        raise CheckpointError(
            f"{where} is a {kind.__module__}.{kind.__qualname__}, which torch.load(weights_only=True) cannot "
            "load; store plain data (tensors, numbers, str, bool, None and lists/tuples/dicts of them, e.g. a "
            "state_dict()), converting with float(x), x.tolist() or torch.as_tensor(x); DTensor state goes "
            "through save_sharded"
        )
    if id(value) in on_path:
        raise CheckpointError(f"{where} contains itself; a checkpoint must be a tree, not a cycle")
    on_path.add(id(value))
    for key, item in (value.items() if isinstance(value, dict) else enumerate(value)):
        if isinstance(value, dict):
            _check_loadable(key, f"{where} key {key!r}", on_path)
        _check_loadable(item, f"{where}[{key!r}]", on_path)
    on_path.discard(id(value))
