"""The on-disk layout of a run's checkpoint directory: step directories, their manifest,
the ``last``/``best`` pointers, and pruning.

Not called directly; see ``neural_arch.distributed.checkpoint`` for how to save and load::

    run/checkpoints/
      step_00000020/state.pt, manifest.json   # manifest: format, step, metric, size + sha256 of each file
      step_00000040/state.pt, shards/, ...     # a sharded checkpoint: DCP files of every rank too
      last -> step_00000020, best -> ...       # symlinks, so checkpoints/last/state.pt opens by hand
      .tmp-*                                   # staging leftovers of a crash: ignored, pruned

Pointers are relative symlinks (the run directory can be moved), swapped atomically. Runs
written before pointers were links have text files naming the step directory instead;
``pointer_target`` reads both, so old runs still resume, and their next save turns the
files into links. Pruning never deletes a pointer's target, so no link dangles.

No collectives here: ``rank0.py`` decides who calls these.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Optional, Union

from neural_arch.distributed.checkpoint.errors import DamagedCheckpoint
from neural_arch.utils.atomic import TMP_PREFIX, commit_file, commit_symlink, delete_atomically, sha256, write_file
from neural_arch.utils.safe_files import read_regular, sha256_regular

FORMAT = 1
STATE_FILE = "state.pt"
MANIFEST = "manifest.json"
POINTERS = ("last", "best")
STEP_DIR = re.compile(r"step_(\d+)")
PathLike = Union[str, Path]
MAX_MANIFEST_BYTES = 64 << 20
"""A manifest lists one line per file; far below this even for thousands of DCP shards."""


@dataclass(frozen=True)
class CheckpointInfo:
    """One step directory of a run's checkpoint directory."""

    path: Path
    """The step directory, e.g. ``run/checkpoints/step_00000020``."""
    step: int
    """The training step it was saved at."""
    metric: Optional[float]
    """The metric passed to ``save_checkpoint`` (None if none, or the manifest is unreadable)."""


def step_name(step: int) -> str:
    """``step_00000020``: zero-padded, so names sort like steps in a directory listing."""
    return f"step_{step:08d}"


def write_manifest(step_dir: Path, step: int, metric: Optional[float], keep_last: Optional[int] = None) -> None:
    """Describe every finished file of ``step_dir`` (``STATE_FILE``, and the DCP shards of a
    sharded checkpoint) by size and sha256; written last, so a step directory with a
    manifest has everything the manifest lists. ``keep_last``: the save's retention, for a
    metric recorded later (``record_metric`` prunes an old ``best`` it releases)."""
    files = sorted(p for p in step_dir.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {
        "format": FORMAT,
        "step": step,
        "metric": metric,
        "keep_last": keep_last,
        "files": {p.relative_to(step_dir).as_posix(): {"sha256": sha256(p), "bytes": p.stat().st_size} for p in files},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    write_file(step_dir / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=2).encode()))


def set_manifest_metric(step_dir: Path, metric: Optional[float]) -> dict[str, Any]:
    """Give a finished step directory its metric (known only after it was saved); the manifest
    it now has. It is replaced whole (old or new bytes, never half); it does not list itself, so
    the files it describes still verify."""
    manifest = read_manifest(step_dir)
    manifest["metric"] = metric
    commit_file(step_dir / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=2).encode()))
    return manifest


def verified_manifest(step_dir: Path) -> dict[str, Any]:
    """The manifest of ``step_dir`` once every file it lists matches it in size and sha256;
    raises ``DamagedCheckpoint`` saying what does not match.

    A manifest is untrusted input: each name must stay inside ``step_dir`` (relative, no
    ``..``, no symlink on the way) and be a regular file of the size it states, so a listed
    ``/dev/zero``, FIFO or link out is refused at once instead of hashed forever.
    """
    manifest = read_manifest(step_dir)
    for name, entry in manifest["files"].items():
        file = _listed_file(step_dir, name)
        if (
            not isinstance(entry, dict)
            or type(entry.get("bytes")) is not int
            or not isinstance(entry.get("sha256"), str)
        ):
            raise DamagedCheckpoint(f"{MANIFEST} entry {_shown(name)} is not {{sha256, bytes}}")
        try:
            size = os.lstat(file).st_size
            if size == entry["bytes"]:
                digest = sha256_regular(file, size)
        except OSError as exc:
            raise DamagedCheckpoint(f"{_shown(name)} cannot be read: {exc}") from None
        if size != entry["bytes"]:
            raise DamagedCheckpoint(
                f"{_shown(name)} has {size} bytes, the manifest says {entry['bytes']}; it was truncated or overwritten"
            )
        if digest != entry["sha256"]:
            raise DamagedCheckpoint(f"{_shown(name)} does not match the sha256 in its manifest; the file is corrupt")
    return manifest


def _listed_file(step_dir: Path, name: Any) -> Path:
    """``step_dir / name`` if ``name`` is a relative path that stays inside ``step_dir``."""
    parts = PurePosixPath(name).parts if isinstance(name, str) else ()
    if not parts or name.startswith("/") or any(part in ("..", ".") for part in parts) or "\x00" in name:
        raise DamagedCheckpoint(f"{MANIFEST} lists {_shown(name)}, which is not a file inside {step_dir}")
    file = step_dir.joinpath(*parts)
    if not file.parent.resolve().is_relative_to(step_dir.resolve()):  # a symlinked directory on the way
        raise DamagedCheckpoint(f"{MANIFEST} lists {_shown(name)}, which leads out of {step_dir} through a symlink")
    return file


def _shown(name: Any) -> str:
    """``name`` for a message, cut short: a manifest may hold anything."""
    text = repr(name) if isinstance(name, str) else f"a {type(name).__name__}"
    return text if len(text) <= 120 else text[:117] + "..."


def read_manifest(step_dir: Path) -> dict[str, Any]:
    """The parsed manifest of ``step_dir``, checked for shape only (``verified_manifest``
    also checks the state file against it)."""
    try:
        data = json.loads(read_regular(step_dir / MANIFEST, MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        raise DamagedCheckpoint(f"{MANIFEST} is missing, so the write never finished") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise DamagedCheckpoint(f"{MANIFEST} is unreadable: {exc}") from None
    try:
        entry = data["files"][STATE_FILE]
        valid = (
            data["format"] == FORMAT
            and type(data["step"]) is int
            and isinstance(entry["sha256"], str)
            and type(entry["bytes"]) is int
            and isinstance(data["metric"], (int, float, type(None)))
        )
    except (KeyError, TypeError):
        valid = False
    if not valid:
        raise DamagedCheckpoint(f"{MANIFEST} is not a format-{FORMAT} manifest")
    return data


def update_pointers(directory: Path, name: str, metric: Optional[float], lower_is_better: bool) -> None:
    """Point ``last`` at step directory ``name``, and ``best`` at the best metric so far."""
    for pointer, target in (("last", name), ("best", best_name(directory, name, metric, lower_is_better))):
        if target is not None:
            commit_symlink(directory / pointer, target)


def best_name(directory: Path, name: str, metric: Optional[float], lower_is_better: bool) -> Optional[str]:
    """The step directory with the best metric once ``name`` is saved (ties: the earliest)."""
    scores = [(metric, name)] if metric is not None else []
    for _, step_dir in step_dirs(directory):
        if step_dir.name != name:  # a re-saved step counts with its new metric only
            try:
                scores.append((read_manifest(step_dir)["metric"], step_dir.name))
            except DamagedCheckpoint:
                pass
    scores = [(m, n) for m, n in scores if m is not None and not math.isnan(m)]
    if not scores:
        return None
    sign = 1.0 if lower_is_better else -1.0
    return min(scores, key=lambda s: (sign * s[0], int(s[1][len("step_") :])))[1]


def prune(directory: Path, keep_last: int, stale: bool = True) -> None:
    """Delete step dirs beyond the newest ``keep_last`` (except pointer targets), so at most
    ``keep_last`` plus ``best`` stay, and (``stale``) leftover ``.tmp-*``."""
    existing = [p for _, p in step_dirs(directory)]
    keep = {p.name for p in existing[-keep_last:]}
    keep.update(target.name for target in (pointer_target(directory, name) for name in POINTERS) if target is not None)
    doomed = [p for p in existing if p.name not in keep]
    doomed += [p for p in directory.iterdir() if stale and p.name.startswith(TMP_PREFIX)]
    for path in doomed:
        try:
            delete_atomically(path)
        except OSError as exc:
            warnings.warn(
                f"could not delete old checkpoint data {path} ({exc}); delete it by hand to free space",
                RuntimeWarning,
                stacklevel=3,
            )


def pointer_target(directory: Path, pointer: str) -> Optional[Path]:
    """The step directory the ``last`` or ``best`` pointer names, if it exists: a symlink,
    or (runs from before pointers were links) a text file holding the name."""
    path = directory / pointer
    try:
        name = Path(os.readlink(path)).name if path.is_symlink() else path.read_text().strip()
    except (OSError, ValueError):
        return None
    return directory / name if STEP_DIR.fullmatch(name) and (directory / name).is_dir() else None


def previous_note(directory: Path) -> str:
    """What a failed save left: the checkpoint a restart will use, for the error message."""
    existing = step_dirs(directory)
    last = pointer_target(directory, "last") or (existing[-1][1] if existing else None)
    if last is None:
        return "there is no earlier checkpoint"
    return f"the previous checkpoint step {int(last.name[len('step_') :])} is intact"


def step_dirs(directory: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``step_N`` directory, oldest first; ``.tmp-*`` never match."""
    if not directory.is_dir():
        return []
    found = [(STEP_DIR.fullmatch(p.name), p) for p in directory.iterdir()]
    return sorted((int(m.group(1)), p) for m, p in found if m and p.is_dir())
