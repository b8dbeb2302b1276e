"""One snapshot part in the keeper's memory: a sealed memory file, and how a worker opens it.

Use (the keeper, ``memory_keeper.py``; a worker, ``keeper_protocol.KeeperClient.open``)::

    blob = Blob.new("neural_arch-snapshot-6-0")     # an anonymous memory file (memfd)
    blob.write(frame); ...; blob.seal()             # as the frames arrive; then nobody writes it again
    answer = {"pid": os.getpid(), **blob.identity}  # what the keeper tells a worker of its host
    fd = open_identified(answer)                    # worker: its own read-only descriptor of that file

Why a memory file: the bytes sit in shared memory outside the keeper's Python heap, the keeper
can hand them over with ``sendfile`` (``get``), and a worker of the same host can open the very
file (``/proc/<keeper pid>/fd/<n>``) and map it: a restore without a socket transfer and
without a second copy. The seals (no write, grow or shrink) make the file read-only for every
holder, so a worker's copy-on-write mapping can never see it change. Where the kernel has no
``memfd_create`` an unlinked temporary file stands in (same calls, on the temporary disk).
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from typing import Any, Optional

SEALS = getattr(fcntl, "F_SEAL_WRITE", 0) | getattr(fcntl, "F_SEAL_GROW", 0) | getattr(fcntl, "F_SEAL_SHRINK", 0)


class Blob:
    """A file descriptor of the keeper's, holding one part's bytes; closed once, idempotently."""

    def __init__(self, fd: int, size: int = 0) -> None:
        self.fd: Optional[int] = fd
        self.size = size

    @classmethod
    def new(cls, name: str) -> Blob:
        if hasattr(os, "memfd_create"):
            return cls(os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING))
        handle = tempfile.TemporaryFile()  # no memfd (not Linux): an unlinked file instead
        return cls(os.dup(handle.fileno()))

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self.size += len(data)

    def seal(self) -> None:
        """No holder (the keeper included) can change the bytes from now on."""
        if SEALS and hasattr(fcntl, "F_ADD_SEALS"):
            try:
                fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, SEALS)
            except OSError:  # a temporary file takes no seals: nobody but the keeper holds it
                pass

    @property
    def identity(self) -> dict[str, int]:
        """What a worker checks the file it opened against: descriptor, device, inode."""
        st = os.fstat(self._fd)
        return {"fd": self._fd, "dev": st.st_dev, "ino": st.st_ino}

    def dup(self) -> Blob:
        """Another descriptor of the same bytes (for a transfer that may outlive this one)."""
        return Blob(os.dup(self._fd), self.size)

    def send(self, conn: socket.socket) -> None:
        """All the bytes into ``conn`` (``sendfile``: no copy through this process)."""
        with os.fdopen(os.dup(self._fd), "rb") as source:
            conn.sendfile(source, 0, self.size)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> Blob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _fd(self) -> int:
        if self.fd is None:
            raise ValueError("the snapshot part was closed")
        return self.fd


def open_identified(answer: dict[str, Any]) -> int:
    """A read-only descriptor of the file the keeper's ``answer`` names (its pid, fd, dev, ino,
    size); OSError when it cannot be opened or is not that file (the keeper let it go meanwhile
    and the number was reused): the caller then asks for the bytes instead."""
    fd = os.open(f"/proc/{int(answer['pid'])}/fd/{int(answer['fd'])}", os.O_RDONLY | os.O_CLOEXEC)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino, st.st_size) != (answer["dev"], answer["ino"], answer["size"]):
        os.close(fd)
        raise OSError(f"the keeper's descriptor {answer['fd']} now names another file")
    return fd
