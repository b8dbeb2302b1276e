"""A memory snapshot as bytes on the move: serialized in frames as sent, read back without a copy.

Use (``memory_snapshot.py``)::

    client.put(step, part, parts, serialized(staged))      # torch.save, a frame at a time
    state = safe_torch_load(Reader(client.get(step, part)))  # the fetched bytes, not copied again
"""

from __future__ import annotations

import io
import queue
import threading
from typing import IO, Any, Iterator, Optional, cast

import torch

from neural_arch.distributed.checkpoint.keeper_protocol import CHUNK


class Reader(io.RawIOBase):
    """A seekable reader over the fetched bytes without copying them (``io.BytesIO`` of a
    ``bytearray`` copies it: the whole snapshot once more, for nothing)."""

    def __init__(self, data: bytearray) -> None:
        self.view, self.at = memoryview(data), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, into: Any) -> int:
        n = min(len(into), len(self.view) - self.at)
        into[:n] = self.view[self.at : self.at + n]
        self.at += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.at = offset + (0, self.at, len(self.view))[whence]
        return self.at

    def tell(self) -> int:
        return self.at


def serialized(state: object) -> Iterator[bytes]:
    """``torch.save(state)`` in frames of ``CHUNK`` bytes, made as the connection takes them (a
    thread serializes into a queue of two), so no serialized whole is ever held; a consumer that
    stops early (the connection broke) stops the serializer too."""
    frames: queue.Queue[Optional[bytes]] = queue.Queue(maxsize=2)
    failed: list[BaseException] = []
    stopped = threading.Event()

    class _Frames(io.RawIOBase):
        def __init__(self) -> None:
            self.buffer = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, data: object) -> int:
            if stopped.is_set():
                raise OSError("the snapshot's connection closed")
            view = memoryview(data).cast("B")  # type: ignore[arg-type]
            self.buffer += view
            while len(self.buffer) >= CHUNK:
                frames.put(bytes(self.buffer[:CHUNK]))
                del self.buffer[:CHUNK]
            return len(view)

    def produce() -> None:
        try:
            out = _Frames()
            torch.save(state, cast(IO[bytes], out))
            frames.put(bytes(out.buffer))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            failed.append(exc)
        finally:
            frames.put(None)

    threading.Thread(target=produce, name="snapshot-serialize", daemon=True).start()
    try:
        while (frame := frames.get()) is not None:
            yield frame
    finally:
        stopped.set()
        while frame is not None:  # unblock the serializer, which then stops at its next write
            frame = frames.get()
    if failed:
        raise failed[0]
