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
helpers live in atomic_files.py. Ranks must share one filesystem (one node, or NFS/Lustre/GPFS).
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

import torch

from neural_arch.distributed.atomic_files import (
    TMP_PREFIX,
    commit_dir,
    delete,
    fsync_dir,
    make_tmp_dir,
    remove,
    sha256,
    tmp_path,
    write_file,
)
from neural_arch.distributed.collectives import all_gather_object
from neural_arch.distributed.process_group import get_rank

if TYPE_CHECKING:
    from neural_arch.distributed.sharded import load_sharded, save_sharded

FORMAT = 1
STATE_FILE = "state.pt"
MANIFEST = "manifest.json"
POINTERS = ("last", "best")
_STEP_DIR = re.compile(r"step_(\d+)")
# What torch.load(weights_only=True) rebuilds (checked against torch 2.13). Exact types on
# purpose: numpy.float64 is a float subclass, but unpickling it needs numpy and fails.
_LEAVES = (type(None), bool, int, float, complex, str, bytes, bytearray, torch.Tensor,
           torch.nn.Parameter, torch.Size, torch.dtype, torch.device, torch.layout)
_CONTAINERS = (dict, OrderedDict, list, tuple, set)
PathLike = Union[str, Path]
T = TypeVar("T")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says which, why, and what is left."""


@dataclass(frozen=True)
class CheckpointInfo:
    """One step directory of a run's checkpoint directory."""

    path: Path
    """The step directory, e.g. ``run/checkpoints/step_00000020``."""
    step: int
    """The training step it was saved at."""
    metric: Optional[float]
    """The metric passed to ``save_checkpoint`` (None if none, or the manifest is unreadable)."""


class _Unusable(Exception):
    """Internal: why one step directory cannot be loaded."""


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
    return _on_rank0(lambda: _write_checkpoint(Path(directory), step, state, keep_last, value, lower_is_better),
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
    if path.is_dir() and (_STEP_DIR.fullmatch(path.name) or (path / MANIFEST).exists()):
        try:
            return _load_one(path, map_location)
        except _Unusable as exc:
            raise CheckpointError(
                f"checkpoint {path} is unusable ({exc}); pass the run's checkpoint directory "
                f"{path.parent} instead to fall back to an older checkpoint."
            ) from None
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file; pass a run's checkpoint directory or one step_* directory in it.")
    candidates = [p for _, p in reversed(_step_dirs(path))]
    reasons = []
    for i, step_dir in enumerate(candidates):
        try:
            return _load_one(step_dir, map_location)
        except _Unusable as exc:
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
    for step, step_dir in _step_dirs(Path(directory)):
        try:
            metric = _read_manifest(step_dir)["metric"]
        except _Unusable:
            metric = None
        infos.append(CheckpointInfo(path=step_dir, step=step, metric=metric))
    return infos


def __getattr__(name: str) -> Any:
    # Why lazy: sharded.py imports CheckpointError and _on_rank0 from here, so a top-level
    # import of it would be a cycle; this keeps ``checkpoint.save_sharded`` importable.
    if name in ("save_sharded", "load_sharded"):
        from neural_arch.distributed import sharded

        return getattr(sharded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _on_rank0(fn: Callable[[], T], failed: str) -> T:
    """Run ``fn`` on global rank 0; every rank returns its result or raises a ``CheckpointError``.

    ``failed`` prefixes errors that are not already a ``CheckpointError``.

    Why gather the outcome: if rank 0 raised alone, the others would wait in their next
    collective until the process-group timeout. The gather is also the barrier: no rank
    returns before rank 0 has finished.
    """
    outcome: tuple[Optional[BaseException], Any] = (None, None)
    if get_rank() == 0:
        try:
            outcome = (None, fn())
        except CheckpointError as exc:
            outcome = (exc, None)
        except Exception as exc:  # noqa: BLE001 - re-raised below, on every rank
            wrapped = CheckpointError(f"{failed}: {exc}")
            wrapped.__cause__ = exc
            outcome = (wrapped, None)
    error, result = all_gather_object((None if outcome[0] is None else str(outcome[0]), outcome[1]))[0]
    if outcome[0] is not None:
        raise outcome[0]
    if error is not None:
        raise CheckpointError(f"{error} (reported by rank 0)")
    return result


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
        for pointer, target in (("last", name), ("best", _best_name(directory, name, metric, lower_is_better))):
            if target is not None:
                staged[pointer] = tmp_path(directory, pointer)
                write_file(staged[pointer], lambda f, t=target: f.write(f"{t}\n".encode()))
        commit_dir(tmp, directory / name)
    except Exception as exc:
        for leftover in staged.values():
            remove(leftover)
        raise CheckpointError(
            f"could not write checkpoint step {step} to {directory}: {exc}; {_previous(directory)}"
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
    _prune(directory, keep_last)
    return CheckpointInfo(path=directory / name, step=step, metric=metric)


def _load_one(step_dir: Path, map_location: Union[str, torch.device]) -> tuple[CheckpointInfo, dict[str, Any]]:
    manifest = _read_manifest(step_dir)
    entry = manifest["files"][STATE_FILE]
    file = step_dir / STATE_FILE
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise _Unusable(f"{STATE_FILE} cannot be read: {exc}") from None
    if size != entry["bytes"]:
        raise _Unusable(f"{STATE_FILE} has {size} bytes, the manifest says {entry['bytes']}; it was truncated or overwritten")
    if sha256(file) != entry["sha256"]:
        raise _Unusable(f"{STATE_FILE} does not match the sha256 in its manifest; the file is corrupt")
    try:
        state = torch.load(file, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure makes it unusable
        raise _Unusable(f"torch.load failed: {exc}") from None
    return CheckpointInfo(path=step_dir, step=manifest["step"], metric=manifest["metric"]), state


def _read_manifest(step_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((step_dir / MANIFEST).read_text())
    except FileNotFoundError:
        raise _Unusable(f"{MANIFEST} is missing, so the write never finished") from None
    except (OSError, ValueError) as exc:
        raise _Unusable(f"{MANIFEST} is unreadable: {exc}") from None
    try:
        entry = data["files"][STATE_FILE]
        valid = (data["format"] == FORMAT and type(data["step"]) is int and isinstance(entry["sha256"], str)
                 and type(entry["bytes"]) is int and isinstance(data["metric"], (int, float, type(None))))
    except (KeyError, TypeError):
        valid = False
    if not valid:
        raise _Unusable(f"{MANIFEST} is not a format-{FORMAT} manifest")
    return data


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


def _best_name(directory: Path, name: str, metric: Optional[float], lower_is_better: bool) -> Optional[str]:
    """The step directory with the best metric once ``name`` is saved (ties: the earliest)."""
    scores = [(metric, name)] if metric is not None else []
    for _, step_dir in _step_dirs(directory):
        if step_dir.name != name:  # a re-saved step counts with its new metric only
            try:
                scores.append((_read_manifest(step_dir)["metric"], step_dir.name))
            except _Unusable:
                pass
    scores = [(m, n) for m, n in scores if m is not None and not math.isnan(m)]
    if not scores:
        return None
    sign = 1.0 if lower_is_better else -1.0
    return min(scores, key=lambda s: (sign * s[0], int(s[1][len('step_'):])))[1]


def _prune(directory: Path, keep_last: int) -> None:
    """Delete step dirs beyond the newest ``keep_last`` (except pointer targets) and stale ``.tmp-*``."""
    step_dirs = [p for _, p in _step_dirs(directory)]
    keep = {p.name for p in step_dirs[-keep_last:]}
    keep.update(target.name for target in map(lambda p: _pointer(directory, p), POINTERS) if target is not None)
    doomed = [p for p in step_dirs if p.name not in keep]
    doomed += [p for p in directory.iterdir() if p.name.startswith(TMP_PREFIX)]
    for path in doomed:
        try:
            delete(path)
        except OSError as exc:
            warnings.warn(f"could not delete old checkpoint data {path} ({exc}); delete it by hand to free space",
                          RuntimeWarning, stacklevel=3)


def _pointer(directory: Path, pointer: str) -> Optional[Path]:
    try:
        name = (directory / pointer).read_text().strip()
    except (OSError, ValueError):
        return None
    return directory / name if _STEP_DIR.fullmatch(name) and (directory / name).is_dir() else None


def _previous(directory: Path) -> str:
    step_dirs = _step_dirs(directory)
    last = _pointer(directory, "last") or (step_dirs[-1][1] if step_dirs else None)
    if last is None:
        return "there is no earlier checkpoint"
    return f"the previous checkpoint step {int(last.name[len('step_'):])} is intact"


def _step_dirs(directory: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``step_N`` directory, oldest first; ``.tmp-*`` never match."""
    if not directory.is_dir():
        return []
    found = [(_STEP_DIR.fullmatch(p.name), p) for p in directory.iterdir()]
    return sorted((int(m.group(1)), p) for m, p in found if m and p.is_dir())
