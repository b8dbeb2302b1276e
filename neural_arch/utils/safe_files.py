"""Open files that may be hostile (listed by a downloaded checkpoint, planted in a run
directory) without following symlinks, blocking on a FIFO, or reading without end.

Use::

    data = read_regular(step_dir / "manifest.json", max_bytes=16 << 20)  # bytes of a regular file, bounded
    digest = sha256_regular(step_dir / "state.pt", size=1234)           # hash exactly a regular file of that size
    fd = open_no_follow(run_dir / "metrics.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # never a link

Why: ``open(path)`` follows a symlink wherever it points (``/dev/zero`` never ends, a FIFO
blocks ``open`` until a writer comes, a link in a run directory writes outside it).
``O_NOFOLLOW`` refuses a link as the last component, ``O_NONBLOCK`` makes opening a FIFO
return at once, and ``fstat`` on the opened descriptor (not the name, which can change in
between) decides whether it is a regular file. Every refusal is an ``OSError`` whose message
names the path and what it is, so callers report it like any unreadable file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

_CHUNK = 1 << 20


def open_no_follow(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode)``; a symlink raises ``OSError`` (ELOOP)
    whose message says the path is a symlink."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "is a symlink, which is not followed (it could point anywhere)", str(path)
            ) from None
        raise


def open_regular(path: Path, follow: bool = False) -> int:
    """A read-only descriptor of ``path`` if it is a regular file (not a FIFO, device or directory;
    not a link either unless ``follow``: a file the user names, such as a config, may be one)."""
    flags = os.O_RDONLY | os.O_NONBLOCK
    fd = os.open(path, flags | os.O_CLOEXEC) if follow else open_no_follow(path, flags)
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            raise OSError(errno.EINVAL, f"is not a regular file (a {_kind_name(kind)})", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, max_bytes: int, follow: bool = False) -> bytes:
    """The bytes of regular file ``path``; ``OSError`` if it is anything else or over ``max_bytes``."""
    fd = open_regular(path, follow)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise OSError(errno.EFBIG, f"has {size} bytes, more than the {max_bytes} allowed", str(path))
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(max_bytes + 1)[:max_bytes]
    finally:
        os.close(fd)


def sha256_regular(path: Path, size: int) -> str:
    """Hex sha256 of regular file ``path``, which must have exactly ``size`` bytes; reads no more."""
    fd = open_regular(path)
    try:
        found = os.fstat(fd).st_size
        if found != size:
            raise OSError(errno.EINVAL, f"has {found} bytes, expected {size}", str(path))
        digest, left = hashlib.sha256(), size
        with os.fdopen(fd, "rb", closefd=False) as f:
            while left > 0:
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    break
                digest.update(chunk)
                left -= len(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _kind_name(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"
