"""What an offline W&B run wrote: read back from its ``.wandb`` files, no server needed.

Use: ``pieces = offline_pieces(run_dir)``: one ``Piece`` per process that wrote to the run
(``RUN_DIR/wandb/offline-run-<time>-<id>[-N]/run-<id>.wandb``), in the order they started,
each with its run id, config, history steps, saved files and exit code.

A ``.wandb`` file is W&B's transaction log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
then LevelDB-log records (``crc32 uint32, length uint16, type uint8, data``, in 32 KiB blocks,
a record split as FIRST/MIDDLE/LAST when it crosses a block), each one a protobuf ``Record``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

BLOCK = 32768
HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
RECORD_HEADER = struct.Struct("<IHB")
FULL, LAST = 1, 4  # a whole record; the last part of a split one


@dataclass
class Piece:
    """One process's part of a W&B run."""

    run_id: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    steps: list[int] = field(default_factory=list)
    """The history rows' steps, in the order they were logged."""
    files: list[str] = field(default_factory=list)
    """The files saved with the run (``run.save``), as named in the run."""
    exit_code: Optional[int] = None
    """None: the process ended without finishing the run."""


def offline_pieces(run_dir: Path) -> list[Piece]:
    """Every offline piece under ``run_dir/wandb``, oldest first (the directory names start with the time)."""
    directories = sorted((run_dir / "wandb").glob("offline-run-*"), key=lambda d: d.name)
    return [read_piece(next(d.glob("run-*.wandb"))) for d in directories]


def read_piece(path: Path) -> Piece:
    """The run record, history steps, files and exit of one ``.wandb`` file."""
    piece = Piece()
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            piece.run_id = record.run.run_id
            piece.config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
        elif kind == "history":
            piece.steps.append(record.history.step.num)
        elif kind == "files":
            piece.files += [f.path for f in record.files.files]
        elif kind == "exit":
            piece.exit_code = record.exit.exit_code
    return piece


def records(path: Path) -> Iterator[Any]:
    """The protobuf records of a ``.wandb`` file, in order (a torn last record is left out)."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    assert data[: len(HEADER)] == HEADER, f"{path}: not a W&B transaction log"
    position, parts = len(HEADER), b""
    while position + RECORD_HEADER.size <= len(data):
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < RECORD_HEADER.size:  # zero padding up to the next block
            position += left_in_block
            continue
        _, length, kind = RECORD_HEADER.unpack_from(data, position)
        start = position + RECORD_HEADER.size
        if kind == 0 or start + length > len(data):  # preallocated zeros or a write cut short
            return
        parts += data[start : start + length]
        position = start + length
        if kind in (FULL, LAST):
            record = Record()
            record.ParseFromString(parts)
            parts = b""
            yield record
