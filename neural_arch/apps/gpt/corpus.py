"""The byte corpus: text files -> train.bin / val.bin (flat uint8) + manifest.json.

Run: ``neural-arch create-data --config gpt`` (on any number of ranks), or
``create_corpus(Path("data/gpt_corpus"), None, val_fraction=0.05, context=128)`` in Python;
read it with ``Corpus(path).train`` (a ``numpy.memmap``).

Deterministic: the files are taken in sorted order of their path relative to the sources'
common folder, and that relative path's sha256 decides the split, so the same sources give
the same bytes on any machine and any world size. Each rank reads (and checks) a strided
share of the files, then writes them at offsets every rank computes alike into files rank 0
preallocated in a staging directory; ``commit_dir`` makes the corpus appear whole or not at
all. Mistakes raise ``ConfigError`` (one line) before anything is written.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

import neural_arch.distributed as nd
from neural_arch.apps.gpt.baselines import byte_baselines
from neural_arch.training.typed_config import ConfigError
from neural_arch.utils.atomic import TMP_PREFIX, commit_dir, remove, write_file

FORMAT = 1
"""Manifest format version; a corpus of another version is refused like a stale one."""
NOT_LIBRARY = {"site-packages", "dist-packages", "__pycache__"}
"""Folders under the stdlib path that hold installed packages or caches, not the library's sources."""


@dataclass(frozen=True)
class SourceFile:
    """One input file: its key (path relative to the sources' common folder) and location."""

    rel: str
    location: str
    """Absolute, symlinks resolved; a string because every rank's start-up check builds one per
    source file (1,790 for the stdlib), and as Path objects they cost more than the scan."""
    size: int
    val_fraction: float

    @property
    def path(self) -> Path:
        return Path(self.location)

    @property
    def split(self) -> str:
        return "val" if self.val_score < self.val_fraction else "train"

    @property
    def val_score(self) -> float:
        """A number in [0, 1) fixed by the relative path alone (machine- and order-independent)."""
        return int.from_bytes(hashlib.sha256(self.rel.encode()).digest()[:8], "big") / 2.0**64


def _entry_files(entry: str) -> list[Path]:
    """The regular files a source entry names: a directory (recursively), a glob, or a file."""
    path = Path(entry).expanduser()
    if any(c in entry for c in "*?["):
        return [Path(p) for p in glob.glob(os.path.expanduser(entry), recursive=True) if Path(p).is_file()]
    if path.is_dir():
        return [
            p
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        ]
    return [path] if path.is_file() else []


def _stdlib_sources(root: str) -> list[str]:
    """The ``.py`` files under ``root`` outside ``NOT_LIBRARY`` folders, symlinks resolved.
    os.walk prunes those folders instead of listing them (an interpreter's site-packages can
    hold 10x the stdlib's files), which is many times faster than rglob-then-filter, and every
    rank checks its corpus against the sources at start-up."""
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in NOT_LIBRARY]
        real = os.path.realpath(folder)
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".py") and os.path.isfile(path):
                found.append(os.path.realpath(path) if os.path.islink(path) else os.path.join(real, name))
    return found


def resolve_sources(source: Optional[list[str]], val_fraction: float) -> list[SourceFile]:
    """The files ``source`` names (null: the stdlib's .py sources), sorted by relative path.
    Plain strings throughout: this runs in the CLI and on every rank before the first step."""
    if source is None:
        found = _stdlib_sources(sysconfig.get_paths()["stdlib"])
    else:
        found = [str(p.resolve()) for entry in source for p in _entry_files(entry)]
    unique = set(found)
    if not unique:
        shown = "the standard library (sysconfig stdlib path)" if source is None else repr(source)
        raise ConfigError(f"data.source={shown} matches no file: give existing directories, globs or files")
    base = os.path.commonpath({os.path.dirname(p) for p in unique})  # the folders: 10x fewer than the files
    files = [SourceFile(p[len(base) :].lstrip("/"), p, os.stat(p).st_size, val_fraction) for p in unique]
    return sorted(files, key=lambda f: f.rel)


def _read_share(files: list[SourceFile], rank: int, world: int) -> dict[int, tuple[bytes, str]]:
    """This rank's files (index -> (bytes, sha256)); a file that is not UTF-8 text gets the
    digest "" (the caller skips it for the default corpus, else every rank raises alike)."""
    mine: dict[int, tuple[bytes, str]] = {}
    for i in range(rank, len(files), world):
        data = files[i].path.read_bytes()
        mine[i] = (data, hashlib.sha256(data).hexdigest()) if _is_text(data) else (b"", "")
    return mine


def _is_text(data: bytes) -> bool:
    """UTF-8 without NUL bytes (NUL bytes mean binary even when they decode)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in data


def _check_sizes(kept: list[SourceFile], source: Any, val_fraction: float, context: int) -> dict[str, int]:
    """Bytes per split; refuses an empty corpus, an empty validation split, a too-short split."""
    sizes = {split: sum(f.size for f in kept if f.split == split) for split in ("train", "val")}
    if sizes["train"] + sizes["val"] == 0:
        raise ConfigError(f"data.source={source!r}: the corpus would be empty (every file has 0 bytes); add text files")
    if sizes["val"] == 0:
        raise ConfigError(
            f"data.val_fraction={val_fraction}: no file of data.source={source!r} falls in the validation split; "
            "raise data.val_fraction or add files"
        )
    smallest = min(sizes, key=lambda s: sizes[s])
    if sizes[smallest] < context + 1:
        raise ConfigError(
            f"model.context={context} needs {context + 1} bytes per window but the {smallest} split "
            f"has {sizes[smallest]}: lower model.context or add text to data.source"
        )
    return sizes


def expected_spec(source: Optional[list[str]], val_fraction: float) -> dict[str, Any]:
    """What a manifest must record for a config to reuse its corpus."""
    return {"format": FORMAT, "source": source, "val_fraction": val_fraction}


def _existing_corpus(path: Path, source: Optional[list[str]], val_fraction: float) -> bool:
    """True if ``path`` holds the corpus asked for; refuses a stale one or a foreign directory."""
    if (path / "manifest.json").exists():
        stale = stale_reason(path, source, val_fraction)
        if stale:
            raise ConfigError(stale)
        return True
    if path.exists():  # commit_dir would replace it: never delete what a user put there
        raise ConfigError(
            f"data.path={str(path)!r} exists but holds no corpus (no manifest.json): "
            "set data.path to a new directory, or delete that one"
        )
    return False


def check_corpus_inputs(path: Path, source: Optional[list[str]], val_fraction: float, context: int) -> None:
    """Every refusal ``create_corpus`` can make, made by one process before any rank starts
    or writes (the default corpus's non-UTF-8 files, which creation skips, are counted here)."""
    if _existing_corpus(path, source, val_fraction):
        return
    files = resolve_sources(source, val_fraction)
    if source is not None:
        bad = next((f for f in files if not _is_text(f.path.read_bytes())), None)
        if bad is not None:
            raise ConfigError(f"data.source file {bad.path} is not UTF-8 text (binary?): remove it from data.source")
    _check_sizes(files, source if source is not None else "stdlib", val_fraction, context)


def create_corpus(path: Path, source: Optional[list[str]], val_fraction: float, context: int) -> Path:
    """Create the corpus at ``path`` (collective: call on every rank); reuse a matching one,
    refuse a stale one. Returns ``path``."""
    rank, world = nd.get_rank(), nd.get_world_size()
    if _existing_corpus(path, source, val_fraction):
        return path
    files = resolve_sources(source, val_fraction)
    mine = _read_share(files, rank, world)
    # Only the digests travel (the bytes stay with the rank that writes them).
    shares = nd.all_gather_object({i: sha for i, (_, sha) in mine.items()})
    digests = {i: sha for share in shares for i, sha in share.items()}  # type: ignore[attr-defined]
    bad = [files[i] for i in sorted(digests) if not digests[i]]
    if bad and source is not None:
        raise ConfigError(f"data.source file {bad[0].path} is not UTF-8 text (binary?): remove it from data.source")
    kept = [f for i, f in enumerate(files) if digests[i]]
    sizes = _check_sizes(kept, source if source is not None else "stdlib", val_fraction, context)
    offsets, at = {}, {"train": 0, "val": 0}
    for i, f in enumerate(files):
        if digests[i]:
            offsets[i], at[f.split] = at[f.split], at[f.split] + f.size
    tmp = path.parent / f"{TMP_PREFIX}{path.name}-creating"  # one name every rank knows without a broadcast
    if rank == 0:
        remove(tmp)
        tmp.mkdir(parents=True)
        for split, size in sizes.items():
            with open(tmp / f"{split}.bin", "wb") as out:
                out.truncate(size)
    nd.barrier()
    _write_share(tmp, files, mine, offsets)
    nd.barrier()
    if rank == 0:
        manifest = _manifest(files, digests, sizes, source, val_fraction)
        # A property of the bytes, computed once here rather than before every run's first step (seconds).
        manifest["baselines"] = byte_baselines(*(_split_file(tmp, split, sizes[split]) for split in ("train", "val")))
        write_file(tmp / "manifest.json", lambda out: out.write(json.dumps(manifest, indent=1).encode()))
        commit_dir(tmp, path)
    nd.barrier()
    return path


def _write_share(
    tmp: Path, files: list[SourceFile], mine: dict[int, tuple[bytes, str]], offsets: dict[int, int]
) -> None:
    """Write this rank's files into the preallocated split files at their offsets, durably."""
    for split in ("train", "val"):
        with open(tmp / f"{split}.bin", "r+b") as out:
            for i, (data, sha) in mine.items():
                if sha and files[i].split == split:
                    out.seek(offsets[i])
                    out.write(data)
            out.flush()
            os.fsync(out.fileno())


def _manifest(
    files: list[SourceFile], digests: dict[int, str], sizes: dict[str, int], source: Any, val_fraction: float
) -> dict[str, Any]:
    listed = [
        {"path": f.rel, "size": f.size, "sha256": digests[i], "split": f.split}
        for i, f in enumerate(files)
        if digests[i]
    ]
    return {
        **expected_spec(source, val_fraction),
        "root": os.path.commonpath({os.path.dirname(f.location) for f in files}),
        "train_bytes": sizes["train"],
        "val_bytes": sizes["val"],
        "total_bytes": sizes["train"] + sizes["val"],
        "files": listed,
        "skipped": [f.rel for i, f in enumerate(files) if not digests[i]],
    }


def stale_reason(path: Path, source: Optional[list[str]], val_fraction: float) -> Optional[str]:
    """Why the corpus at ``path`` does not belong to this config (one line), or None if it does."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        return f"data.path={str(path)!r} holds no readable corpus manifest ({exc}); delete it and create the data again"
    want = expected_spec(source, val_fraction)
    got = {k: manifest.get(k) for k in want}
    if got != want:
        return (
            f"data.path={str(path)!r} holds a corpus made with {got}, but the config asks for {want}: "
            "delete that directory or set data.path to a new one"
        )
    # The sources may have changed since (edited files, another interpreter, another cwd):
    # a cheap rescan of names and sizes, no reading.
    now = {f.rel: f.size for f in resolve_sources(source, val_fraction)}
    then = {f["path"]: f["size"] for f in manifest["files"]}
    changed = sorted(r for r in then if now.get(r) != then[r]) + sorted(set(now) - set(then) - set(manifest["skipped"]))
    if changed:
        return (
            f"data.path={str(path)!r} is stale: {len(changed)} source file(s) changed, appeared or vanished since "
            f"it was made (first: {changed[0]}); delete that directory or set data.path to a new one"
        )
    return None


def _split_file(folder: Path, split: str, size: int) -> np.ndarray:
    return np.memmap(folder / f"{split}.bin", dtype=np.uint8, mode="r", shape=(size,))


class Corpus:
    """A created corpus: ``train``/``val`` as read-only uint8 memmaps, and its manifest."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest = json.loads((path / "manifest.json").read_text())
        self.train = self._open("train")
        self.val = self._open("val")

    def _open(self, split: str) -> np.ndarray:
        size = self.manifest[f"{split}_bytes"]
        if (self.path / f"{split}.bin").stat().st_size != size:
            raise ValueError(
                f"{self.path / f'{split}.bin'} has the wrong size (manifest says {size} bytes); "
                "delete the corpus directory and create the data again"
            )
        return _split_file(self.path, split, size)
