"""What checkpoint.py and sharded.py share: the error and info types, the on-disk layout
of a run's checkpoint directory (step directories, manifest, ``last``/``best`` pointers,
pruning), and the protocol by which rank 0 writes while every rank learns the outcome.

Not called directly; see ``neural_arch.distributed.checkpoint`` for how to save and load.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

from neural_arch.distributed.atomic_files import TMP_PREFIX, delete
from neural_arch.distributed.collectives import all_gather_object
from neural_arch.distributed.process_group import get_rank

FORMAT = 1
STATE_FILE = "state.pt"
MANIFEST = "manifest.json"
POINTERS = ("last", "best")
STEP_DIR = re.compile(r"step_(\d+)")
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


class Unusable(Exception):
    """Why one step directory cannot be loaded (caught by the loaders, never seen by users)."""


def on_rank0(fn: Callable[[], T], failed: str) -> T:
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


def read_manifest(step_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((step_dir / MANIFEST).read_text())
    except FileNotFoundError:
        raise Unusable(f"{MANIFEST} is missing, so the write never finished") from None
    except (OSError, ValueError) as exc:
        raise Unusable(f"{MANIFEST} is unreadable: {exc}") from None
    try:
        entry = data["files"][STATE_FILE]
        valid = (data["format"] == FORMAT and type(data["step"]) is int and isinstance(entry["sha256"], str)
                 and type(entry["bytes"]) is int and isinstance(data["metric"], (int, float, type(None))))
    except (KeyError, TypeError):
        valid = False
    if not valid:
        raise Unusable(f"{MANIFEST} is not a format-{FORMAT} manifest")
    return data


def best_name(directory: Path, name: str, metric: Optional[float], lower_is_better: bool) -> Optional[str]:
    """The step directory with the best metric once ``name`` is saved (ties: the earliest)."""
    scores = [(metric, name)] if metric is not None else []
    for _, step_dir in step_dirs(directory):
        if step_dir.name != name:  # a re-saved step counts with its new metric only
            try:
                scores.append((read_manifest(step_dir)["metric"], step_dir.name))
            except Unusable:
                pass
    scores = [(m, n) for m, n in scores if m is not None and not math.isnan(m)]
    if not scores:
        return None
    sign = 1.0 if lower_is_better else -1.0
    return min(scores, key=lambda s: (sign * s[0], int(s[1][len('step_'):])))[1]


def prune(directory: Path, keep_last: int) -> None:
    """Delete step dirs beyond the newest ``keep_last`` (except pointer targets) and stale ``.tmp-*``."""
    existing = [p for _, p in step_dirs(directory)]
    keep = {p.name for p in existing[-keep_last:]}
    keep.update(target.name for target in (pointer_target(directory, name) for name in POINTERS) if target is not None)
    doomed = [p for p in existing if p.name not in keep]
    doomed += [p for p in directory.iterdir() if p.name.startswith(TMP_PREFIX)]
    for path in doomed:
        try:
            delete(path)
        except OSError as exc:
            warnings.warn(f"could not delete old checkpoint data {path} ({exc}); delete it by hand to free space",
                          RuntimeWarning, stacklevel=3)


def pointer_target(directory: Path, pointer: str) -> Optional[Path]:
    """The step directory the ``last`` or ``best`` file names, if it exists."""
    try:
        name = (directory / pointer).read_text().strip()
    except (OSError, ValueError):
        return None
    return directory / name if STEP_DIR.fullmatch(name) and (directory / name).is_dir() else None


def previous_note(directory: Path) -> str:
    """What a failed save left: the checkpoint a restart will use, for the error message."""
    existing = step_dirs(directory)
    last = pointer_target(directory, "last") or (existing[-1][1] if existing else None)
    if last is None:
        return "there is no earlier checkpoint"
    return f"the previous checkpoint step {int(last.name[len('step_'):])} is intact"


def step_dirs(directory: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``step_N`` directory, oldest first; ``.tmp-*`` never match."""
    if not directory.is_dir():
        return []
    found = [(STEP_DIR.fullmatch(p.name), p) for p in directory.iterdir()]
    return sorted((int(m.group(1)), p) for m, p in found if m and p.is_dir())
