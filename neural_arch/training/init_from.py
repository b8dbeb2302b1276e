"""Start a run from another run's weights: ``run.init_from: PATH`` (fine-tuning).

Used by trainer.py when a run starts fresh (nothing to resume)::

    step = init_weights_from(components, cfg.run.init_from)   # the weights of PATH's newest checkpoint

PATH is a run directory, its ``checkpoints/`` or one ``step_*`` directory, saved on any layout
in either format; only the model's weights are taken, so the optimizer, the schedule and the
step count start anew. The checkpoint's names and shapes are checked against this run's
model first (built on the meta device: no memory): a missing, extra or mis-shaped key is a
one-line ``ConfigError`` naming the first one, before anything is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from neural_arch.distributed.checkpoint import has_shards, load_checkpoint
from neural_arch.distributed.checkpoint.layout import STATE_FILE
from neural_arch.distributed.checkpoint.shards import SHARDS
from neural_arch.training.components import TrainingComponents
from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError


def init_weights_from(components: TrainingComponents, path: str) -> int:
    """Load the model weights of the newest usable checkpoint at ``path`` (every rank); the step it was saved at."""
    where = Path(path)
    if (where / "checkpoints").is_dir():
        where = where / "checkpoints"
    if where.name == STATE_FILE and where.is_file():  # step_*/state.pt: the step directory is meant
        where = where.parent
    if not where.exists():
        raise ConfigError(f"run.init_from={path}: does not exist; name a run directory, its checkpoints/ or a step_*")
    if not where.is_dir():
        raise ConfigError(
            f"run.init_from={path}: is a file, not a checkpoint directory; name a run directory, its checkpoints/ "
            "or a step_* directory in it"
        )
    found = load_checkpoint(where)
    if found is None:
        raise ConfigError(f"run.init_from={path}: no checkpoint there (no step_* directories); train that run first")
    info, state = found
    check_weights(path, expected_shapes(components.task), saved_shapes(info.path, state))
    components.placement.load_weights(info.path, state)
    return info.step


def expected_shapes(task: Task) -> dict[str, tuple[int, ...]]:
    """Every state-dict key of the task's model and its shape (a meta build: no memory, no RNG draws)."""
    with torch.device("meta"):
        model = task.build_model()
    return {key: tuple(value.shape) for key, value in model.state_dict().items()}


def saved_shapes(step_dir: Path, state: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The model keys and shapes a checkpoint holds: its full ``model`` or its shards' metadata."""
    if not has_shards(state):
        return {key: tuple(value.shape) for key, value in state["model"].items()}
    from neural_arch.distributed.checkpoint.untrusted import read_dcp_metadata

    found = read_dcp_metadata(step_dir / SHARDS).state_dict_metadata
    return {key[len("model.") :]: tuple(md.size) for key, md in found.items() if key.startswith("model.")}


def check_weights(path: str, expected: dict[str, tuple[int, ...]], saved: dict[str, tuple[int, ...]]) -> None:
    """One line naming the first key the model needs and the checkpoint lacks, or the reverse, or a shape."""
    missing = [key for key in expected if key not in saved]
    extra = [key for key in saved if key not in expected]
    wrong = [key for key in expected if key in saved and expected[key] != saved[key]]
    fix = "initialise from a run of the same model settings (model: section), or leave run.init_from unset"
    if missing:
        raise ConfigError(
            f"run.init_from={path}: the checkpoint has no {missing[0]!r} that this model needs "
            f"({len(missing)} missing); {fix}"
        )
    if extra:
        raise ConfigError(
            f"run.init_from={path}: the checkpoint holds {extra[0]!r}, which this model does not have "
            f"({len(extra)} extra); {fix}"
        )
    if wrong:
        key = wrong[0]
        raise ConfigError(
            f"run.init_from={path}: {key!r} has shape {list(saved[key])} in the checkpoint but "
            f"{list(expected[key])} in this model ({len(wrong)} mis-shaped); {fix}"
        )
