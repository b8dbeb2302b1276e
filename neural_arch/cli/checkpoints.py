"""Reading a training checkpoint named on the command line (``export``, ``generate``).

Use: ``state = read_checkpoint("runs/NAME")`` then ``task_of(state).generate(...)``. The path
may be a run directory, its ``checkpoints/`` directory (the newest usable step is taken) or
one ``step_*`` directory.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from neural_arch.training.task import Task


def add_checkpoint_argument(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint DIR`` (required), read by ``read_checkpoint``."""
    parser.add_argument(
        "--checkpoint", required=True, help="a run directory, its checkpoints/ directory or one step_* directory"
    )
    parser.add_argument(
        "--task",
        default=None,
        help="the task that trained it, e.g. package.module:TaskClass (default: the checkpoint's run.task, "
        "resolved among installed and registered tasks only: a checkpoint never makes us import a module)",
    )


def read_checkpoint(path: str) -> dict[str, Any]:
    """The state of the newest usable checkpoint at ``path``; ValueError naming the path if none."""
    from neural_arch.distributed.checkpoint import (
        load_checkpoint,
        with_whole_model,
    )  # torch: once the arguments are fine

    where = Path(path)
    if (where / "checkpoints").is_dir():
        where = where / "checkpoints"
    if not where.exists():
        raise ValueError(
            f"--checkpoint {path}: does not exist; pass a run directory, its checkpoints/ or one step_* directory in it"
        )
    found = load_checkpoint(where)
    if found is None:
        raise ValueError(
            f"--checkpoint {path}: no checkpoint there (no step_* directories); train first or fix the path"
        )
    info, state = found
    return with_whole_model(info.path, state)  # a sharded checkpoint's model, gathered here in one process


def task_of(state: dict[str, Any], given: Optional[str] = None) -> type[Task]:
    """The task class that trained the checkpoint: ``given`` (``--task``, which the user typed,
    so it may import a module), else the checkpoint's ``run.task`` among installed tasks only."""
    from neural_arch.training.registry import task_class

    if given is not None:
        return task_class(given)
    config = state.get("config", {}) if isinstance(state, dict) else {}
    run = config.get("run", {}) if isinstance(config, dict) else {}
    if not isinstance(run, dict) or "task" not in run:
        raise ValueError("the checkpoint's config names no run.task; it was not written by `neural-arch train`")
    return task_class(run["task"], allow_import=False)
