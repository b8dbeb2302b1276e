"""The validation metrics of a saved checkpoint: ``neural-arch evaluate`` (cli/evaluate.py).

Use, on every rank of a job (or in one process)::

    cfg = load_config(checkpoint_config(path), overrides)   # the run's own config.yaml
    step, metrics = evaluate_checkpoint(cfg, path)          # the trainer's numbers at that step

The model is built for ``cfg`` on this job's layout and takes only the checkpoint's weights
(``run.init_from``'s machinery: any layout, either format), then the trainer's exact
validation (``step.evaluate``) runs. Nothing is written to the run directory's checkpoints.
A ``config.yaml`` read from beside a checkpoint is not trusted: its ``run.task`` resolves
among registered and installed tasks only (a module shipped beside a run is never imported).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

from neural_arch.training.typed_config import ConfigError

CONFIG_FILE = "config.yaml"


def run_dir_of(path: str) -> Optional[Path]:
    """The run directory that holds the checkpoint ``path`` names (itself, its ``checkpoints/``
    or a ``step_*`` in it); None when ``path`` is not inside a run directory."""
    where = Path(path)
    if where.name == "state.pt":
        where = where.parent
    for candidate in (where, where.parent, where.parent.parent):
        if (candidate / "checkpoints").is_dir() and where.resolve().is_relative_to(candidate.resolve()):
            return candidate
    return None


def check_checkpoint_path(path: str) -> None:
    """One-line ``ConfigError`` when ``path`` does not exist or holds no checkpoint."""
    from neural_arch.distributed.checkpoint.layout import step_dirs

    where = Path(path)
    fix = "pass a run directory, its checkpoints/ or one step_* directory in it"
    if not where.exists():
        raise ConfigError(f"{path}: does not exist; {fix}")
    if where.is_file() and where.name != "state.pt":
        raise ConfigError(f"{path}: is a file, not a checkpoint; {fix}")
    if (where / "checkpoints").is_dir():
        where = where / "checkpoints"
    if where.is_dir() and not where.name.startswith("step_") and not step_dirs(where):
        raise ConfigError(f"{path}: no checkpoint there (no step_* directories); train first or fix the path")


def checkpoint_config(path: str, overrides: Sequence[str]) -> str:
    """The ``config.yaml`` of the run holding ``path``, its ``run.task`` checked (registered or
    installed tasks only) unless ``overrides`` name the task."""
    import yaml

    from neural_arch.training.registry import task_class

    run_dir = run_dir_of(path)
    if run_dir is None or not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError(f"{path}: no {CONFIG_FILE} in its run directory; pass the run's config with --config FILE")
    file = run_dir / CONFIG_FILE
    raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    run = raw.get("run") if isinstance(raw, dict) else None
    if not any(text.startswith("run.task=") for text in overrides) and isinstance(run, dict) and "task" in run:
        try:
            task_class(run["task"], allow_import=False)  # a name from a file someone else may have written
        except ConfigError:
            raise ConfigError(
                f"{file}: run.task {run['task']!r} is not a registered or installed task, and a task named in a "
                f"file is never imported (it could run any code); if you trust it, pass --set run.task={run['task']}"
            ) from None
    return str(file)


def evaluate_checkpoint(cfg: Any, path: str) -> tuple[int, dict[str, float]]:
    """Join the job's process group, build ``cfg``'s model, load ``path``'s weights, validate:
    (the checkpoint's step, the exact metrics, the same on every rank)."""
    import neural_arch.distributed as nd
    from neural_arch.training.init_from import init_weights_from
    from neural_arch.training.run_start import build_components
    from neural_arch.training.step import evaluate

    training = cfg.training
    nd.init_process_group(backend=None if training.backend == "auto" else training.backend, timeout=training.timeout)
    components = build_components(cfg, create_data=False)
    step = init_weights_from(components, path)
    return step, evaluate(components)


def report(path: str, step: int, metrics: dict[str, float], world_size: int) -> dict[str, Any]:
    """What ``neural-arch evaluate`` prints and writes as JSON (floats round-trip exactly)."""
    return {"checkpoint": str(path), "step": step, "world_size": world_size, "metrics": metrics}


def write_report(result: dict[str, Any], file: Path) -> None:
    """``result`` as JSON at ``file``, atomically."""
    from neural_arch.utils.atomic import commit_file

    text = (json.dumps(result, indent=2) + "\n").encode("utf-8")
    commit_file(file, lambda out: out.write(text))
