"""Crash-safe files and directories: stage under ``.tmp-*``, fsync, then rename into place.

Use::

    commit_file(path, lambda f: f.write(text.encode()))  # path holds the old or the new bytes, never half
    tmp = make_tmp_dir(parent, "step_00000020")           # parent/.tmp-step_00000020-<hex>
    write_file(tmp / "state.pt", lambda f: torch.save(state, f))
    commit_dir(tmp, parent / "step_00000020")             # appears complete, or not at all
    commit_symlink(parent / "last", "step_00000020")       # parent/last -> step_00000020, swapped atomically

Why: a crash (or a full disk) in the middle of a plain ``open(path, "w")`` leaves a
truncated file where a good one was. A rename is atomic, and the fsyncs make it durable
(without them a power loss can undo the rename, or keep it but lose the data).

Anything a crash leaves behind is named ``.tmp-*`` (``TMP_PREFIX``), so readers can ignore
it and the next writer can delete it. The one shared helper for every atomic write in the
package (checkpoints, saved configs, exports); no collectives here: callers decide which
rank writes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional

TMP_PREFIX = ".tmp-"


def tmp_path(parent: Path, label: str) -> Path:
    """A fresh name ``parent/.tmp-{label}-<12 hex>`` to stage (or discard) something under."""
    return parent / f"{TMP_PREFIX}{label}-{uuid.uuid4().hex[:12]}"


def make_tmp_dir(parent: Path, name: str) -> Path:
    """Create (with ``parent``) and return a fresh staging directory ``parent/.tmp-{name}-<hex>``."""
    parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(parent, name)
    tmp.mkdir()  # not tempfile.mkdtemp: its mode 0700 would survive the rename
    return tmp


def write_file(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """Create ``path`` with ``write(binary file)`` and fsync it; for files inside a staging
    directory, which ``commit_dir`` then makes visible (elsewhere use ``commit_file``)."""
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make renames/creations inside ``path`` durable (a crash could otherwise undo them)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (checkpoints can be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def remove(path: Optional[Path]) -> None:
    """Best effort: anything left behind is named ``.tmp-*`` and pruned by the next save."""
    if path is not None and path.is_dir() and not path.is_symlink():  # a link: unlink it, not its target
        shutil.rmtree(path, ignore_errors=True)
    elif path is not None:
        with suppress(OSError):
            path.unlink(missing_ok=True)


def commit_file(path: Path, write: Callable[[BinaryIO], Any], check: Optional[Callable[[Path], None]] = None) -> None:
    """Replace ``path`` atomically with what ``write(binary file)`` writes: staged as a
    ``.tmp-*`` sibling (same directory, so the rename cannot cross filesystems), fsynced,
    ``check(staged path)`` run if given (it raises to refuse the file, e.g. an export whose
    reloaded output is wrong), renamed over ``path``, then the directory fsynced. On any
    failure ``path`` is untouched and the staged file removed."""
    tmp = tmp_path(path.parent, path.name)
    try:
        write_file(tmp, write)
        if check is not None:
            check(tmp)
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    fsync_dir(path.parent)


def commit_symlink(path: Path, target: str) -> None:
    """Make ``path`` a symbolic link to ``target`` (relative to ``path``'s directory),
    replacing whatever file or link is there in one rename: readers see the old link or
    the new one, never none. The link is created under a ``.tmp-*`` name first, then
    ``os.replace``d over ``path`` and the directory fsynced."""
    tmp = tmp_path(path.parent, path.name)
    try:
        os.symlink(target, tmp)
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise
    fsync_dir(path.parent)


def commit_dir(tmp: Path, final: Path) -> None:
    """Rename the finished ``tmp`` to ``final``; an existing ``final`` is moved aside first and
    deleted only after the rename, or moved back if the rename fails."""
    replaced = None
    if final.exists():
        aside = tmp_path(final.parent, f"replaced-{final.name}")
        os.rename(final, aside)
        replaced = aside
    try:
        os.rename(tmp, final)
    except OSError:
        if replaced is not None:
            os.rename(replaced, final)
        raise
    fsync_dir(final.parent)
    remove(replaced)


def delete_atomically(path: Path) -> None:
    """Delete the file or directory ``path``; it vanishes atomically, never half-deleted: unless it
    is already ``.tmp-*``, it is first renamed to ``.tmp-deleting-*``. Raises ``OSError``."""
    if not path.name.startswith(TMP_PREFIX):
        path = path.rename(tmp_path(path.parent, f"deleting-{path.name}"))
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
