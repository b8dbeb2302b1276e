"""What offline W&B runs hold, read from their transaction logs in ``RUN_DIR/wandb`` (no server needed).

Used by wandb_tracking.py: ``last_offline_step(run_dir / "wandb", run_id)`` is the last history step
that earlier processes of the offline run ``run_id`` wrote to disk (0 if none); ``records(path)``
yields one ``.wandb`` file's records (tests read runs back with it too).

Why read the files: W&B's service process keeps rows in memory for up to 15 s before they reach the
file (or the server), and a killed process's service exits without writing them; after a restart
only the files say which rows the run holds. Each process of a run writes one piece,
``offline-run-<time>-<id>[-N]/run-<id>.wandb``: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
then LevelDB-log records (``crc32 uint32, length uint16, type uint8, data`` in 32 KiB blocks, a
record crossing a block split into first/middle/last parts), each a protobuf ``Record``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, Iterator

BLOCK = 32768
HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
RECORD_HEADER = struct.Struct("<IHB")
FULL, LAST = 1, 4  # a whole record; the last part of a split one


def last_offline_step(wandb_dir: Path, run_id: str) -> int:
    """The highest history step in the offline pieces of run ``run_id`` under ``wandb_dir``; 0 if none."""
    steps = [0]
    for piece in wandb_dir.glob(f"offline-run-*-{run_id}*/run-{run_id}.wandb"):
        steps += [r.history.step.num for r in records(piece) if r.WhichOneof("record_type") == "history"]
    return max(steps)


def records(path: Path) -> Iterator[Any]:
    """The protobuf records of a ``.wandb`` file, in order; none from a file of another format, and a
    record cut short (its process killed while writing) ends the file."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    if data[: len(HEADER)] != HEADER:
        return
    position, parts = len(HEADER), b""
    while position + RECORD_HEADER.size <= len(data):
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < RECORD_HEADER.size:  # zero padding up to the next block
            position += left_in_block
            continue
        _, length, kind = RECORD_HEADER.unpack_from(data, position)
        start = position + RECORD_HEADER.size
        if kind == 0 or start + length > len(data):
            return
        parts += data[start : start + length]
        position = start + length
        if kind in (FULL, LAST):
            record = Record()
            record.ParseFromString(parts)
            parts = b""
            yield record
