"""What an offline W&B run wrote, read back from its ``.wandb`` files (no server needed).

Use: ``pieces = offline_pieces(run_dir)``: one ``Piece`` per process that wrote to the run
(``RUN_DIR/wandb/offline-run-<time>-<id>[-N]/run-<id>.wandb``), in the order they started,
each with its run id, config, history steps, saved files and exit code. The records come from
``neural_arch.training.wandb_files.records`` (the format is described there).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from neural_arch.training.wandb_files import records


@dataclass
class Piece:
    """One process's part of a W&B run."""

    run_id: str
    """From the file's name, which W&B gives it as soon as the process starts the run."""
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
    """The config, history steps, files and exit of one ``.wandb`` file."""
    piece = Piece(run_id=path.stem.removeprefix("run-"))
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            piece.config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
        elif kind == "history":
            piece.steps.append(record.history.step.num)
        elif kind == "files":
            piece.files += [f.path for f in record.files.files]
        elif kind == "exit":
            piece.exit_code = record.exit.exit_code
    return piece
