"""Typed training configuration: defaults < YAML file < ``--set section.key=value``.

Use: ``cfg = load_config("tiny", ["optim.lr=0.1", "training.steps=50"])`` (a recipe's name or a file);
``save_config(cfg, "runs/x/config.yaml")`` writes YAML that loads back to an equal ``Config``.

Loading is generic: the dataclasses below are the schema (types from their annotations,
choices from ``Literal``), so adding a field needs no loader code, only a range rule if it
has one. The ``model:`` and ``data:`` sections belong to the application: ``run.task``
names a ``Task`` whose ``SECTIONS`` (an ``AppSections``: two dataclasses and their rules)
define them (see neural_arch/training/task.py). Every mistake raises ``ConfigError`` with
one line naming the key path, the bad value, what is allowed and, for names, the closest
valid one.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from neural_arch.distributed.data_parallel.compression import Compression
from neural_arch.distributed.parallel.layout import ParallelLayout
from neural_arch.training.batch_sizes import check_batch_sizes
from neural_arch.training.config_sections import (
    CheckpointConfig,
    LoggingConfig,
    OptimConfig,
    RunConfig,
    ScheduleConfig,
    TrainingConfig,
)
from neural_arch.training.config_source import apply_override, read_yaml, task_name
from neural_arch.training.layout_check import check_layout
from neural_arch.training.profiling import ProfilingConfig
from neural_arch.training.recipes import config_file
from neural_arch.training.registry import task_class
from neural_arch.training.task import RangeRule, Task
from neural_arch.training.typed_config import POSITIVE, UNIT, ConfigError, at_least, build, names, show, unknown
from neural_arch.utils.atomic import commit_file

__all__ = [
    "CheckpointConfig",
    "Config",
    "LoggingConfig",
    "OptimConfig",
    "RunConfig",
    "ScheduleConfig",
    "TrainingConfig",
    "config_to_dict",
    "load_config",
    "read_config",
    "save_config",
    "section_types",
    "validate_config",
]


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    """Naming, output directory, seed."""
    model: Any = field(default_factory=lambda: task_class(RunConfig.task).SECTIONS.model())
    """Model architecture: the ``SECTIONS.model`` dataclass of the task ``run.task`` names."""
    data: Any = field(default_factory=lambda: task_class(RunConfig.task).SECTIONS.data())
    """Dataset: the ``SECTIONS.data`` dataclass of the task ``run.task`` names."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer."""
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    """Learning-rate schedule."""
    training: TrainingConfig = field(default_factory=TrainingConfig)
    """Loop length, batch sizes, distribution, numerics."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Saving and resuming."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Metrics and progress output."""
    parallel: ParallelLayout = field(default_factory=ParallelLayout)
    """How the model is spread over the ranks; all defaults: a full replica per rank (DDP)."""
    ddp: Compression = field(default_factory=Compression)
    """DDP's gradient exchange: bucket size and compression (``none``, the default, is exact)."""
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    """``torch.profiler`` over a window of steps on chosen ranks (off by default)."""


# ---- range rules of the framework's sections: key path -> (predicate, what is allowed);
# None values are skipped. The task adds the rules of its model/data sections (Task.SECTIONS.ranges).
_RANGES: dict[str, RangeRule] = {
    "optim.lr": (
        (lambda v: 0 < v <= 1e100),
        "> 0 and <= 1e100 (larger overflows the schedule and optimizer arithmetic)",
    ),
    "run.seed": ((lambda v: 0 <= v < 2**63), "an integer in [0, 2**63) (torch's generators take 64-bit seeds)"),
    "optim.momentum": UNIT,
    "optim.weight_decay": at_least(0),
    "optim.betas": ((lambda v: all(0 <= b < 1 for b in v)), "two numbers in [0, 1)"),
    "schedule.warmup_steps": at_least(0),
    "schedule.min_lr_ratio": UNIT,
    "training.steps": at_least(1),
    "training.global_batch_size": at_least(1),
    "training.grad_accum_steps": at_least(1),
    "training.nproc_per_node": at_least(1),
    "training.max_restarts": at_least(0),
    "training.grad_clip": ((lambda v: v > 0), "> 0 (or null to disable clipping)"),
    "training.val_every": at_least(0),
    "training.val_batches": at_least(1),
    "training.data_workers": at_least(0),
    "training.timeout": POSITIVE,
    "checkpoint.every_steps": at_least(0),
    "checkpoint.keep_last": at_least(1),
    "checkpoint.memory_every": at_least(0),
    "checkpoint.resume": ((lambda v: v != ""), "'auto', 'none' or a checkpoint path"),
    "run.init_from": ((lambda v: v.strip() != ""), "a checkpoint path (or null)"),
    "logging.every_steps": at_least(1),
    "logging.peak_flops": POSITIVE,
    "logging.straggler_threshold": POSITIVE,
    "logging.straggler_intervals": at_least(1),
    "profiling.first_step": at_least(1),
    "profiling.steps": at_least(1),
    "ddp.powersgd_rank": at_least(1),
    "ddp.bucket_mb": POSITIVE,
    "ddp.powersgd_warmup_steps": (
        lambda v: v >= 2,
        ">= 2 (DDP settles its buckets after step 1; PowerSGD starts after)",
    ),
}


def load_config(
    path: Optional[str | Path] = None, overrides: Sequence[str] = (), *, world_size: Optional[int] = None
) -> Config:
    """Defaults, then the YAML file at ``path`` (if any; or a recipe's name: recipes.py), then
    ``overrides``, then validation (``validate_config``).

    ``world_size``: ranks the run will use, for the layout and batch divisibility checks; when
    None and ``training.distributed`` is true, ``training.nproc_per_node`` stands in for it.
    """
    cfg = read_config(path, overrides)
    validate_config(cfg, world_size=world_size)
    return cfg


def read_config(path: Optional[str | Path] = None, overrides: Sequence[str] = ()) -> Config:
    """``load_config`` without the range and cross-field checks: every key and type is checked,
    but the config is not valid until ``validate_config`` says so. For a caller that learns the
    world size from the config itself (``neural-arch train``: ``training.nproc_per_node``) and
    checks once for that world."""
    raw = read_yaml(config_file(path), Config) if path is not None else {}
    task = task_class(task_name(raw, overrides, RunConfig.task))  # the task decides what model:/data: may hold
    sections = section_types(task)
    for text in overrides:
        apply_override(raw, text, sections, Config)
    for name in raw:
        if name not in sections:
            unknown("", name, Config)
    return Config(**{name: build(cls, raw.get(name), name) for name, cls in sections.items()})


def section_types(task: type[Task]) -> dict[str, type]:
    """Section name -> its dataclass: the framework's sections plus the task's model and data."""
    hints = typing.get_type_hints(Config)
    own = {"model": task.SECTIONS.model, "data": task.SECTIONS.data}
    return {name: own.get(name) or hints[name] for name in names(Config)}


_VALIDATED: set[str] = set()
"""The (config, world size) pairs this process has validated, by value (``_validated_key``)."""


def validate_config(cfg: Config, *, world_size: Optional[int] = None) -> None:
    """Range and cross-field checks, for ``world_size`` ranks (None: unknown yet; with
    ``training.distributed``, ``training.nproc_per_node`` stands in); a one-line ConfigError.

    Run before anything starts (``neural-arch train`` in the launching process), and again by
    each worker for the world that did start (run_start.py: torchrun, srun or mpirun may start
    one the config did not name). A process checks a given config on a given world once: an
    equal config on the same world passed already answers at once, so a worker's second call
    (the CLI's check, then the trainer's) costs one comparison. A config edited since is a
    new one and is checked again."""
    if world_size is None and cfg.training.distributed:
        world_size = cfg.training.nproc_per_node
    key = _validated_key(cfg, world_size)
    if key in _VALIDATED:
        return
    task = task_class(cfg.run.task)
    for rule_key, (ok, allowed) in {**_RANGES, **task.SECTIONS.ranges}.items():
        section, name = rule_key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is not None and not ok(value):
            raise ConfigError(f"{rule_key}={show(value)} is out of range: must be {allowed}")
    task.SECTIONS.validate(cfg)
    dp_ranks = check_layout(cfg, world_size, task)  # every rule of the parallel: section (layout_check.py)
    check_batch_sizes(cfg.training, world_size, dp_ranks, cfg.parallel.microbatches or 1)
    if world_size is not None and any(not 0 <= r < world_size for r in cfg.profiling.ranks):
        raise ConfigError(
            f"profiling.ranks={cfg.profiling.ranks} names a rank outside this world of {world_size}; "
            f"choose among 0..{world_size - 1}"
        )
    if cfg.training.data_workers and not cfg.training.prefetch:
        raise ConfigError(
            f"training.data_workers={cfg.training.data_workers} builds batches ahead, which training.prefetch=false "
            "forbids (batch() draws from the global RNG); set training.data_workers=0 or training.prefetch=true"
        )
    _VALIDATED.add(key)


def _validated_key(cfg: Config, world_size: Optional[int]) -> str:
    # Every field's value with its type (repr: 1 and True, 2 and 2.0 differ), whatever the task's sections hold.
    return f"{config_to_dict(cfg)!r} on {world_size!r}"


def config_to_dict(cfg: Config) -> dict:
    """A plain dict of builtins (tuples become lists) that ``yaml.safe_dump`` accepts."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return [plain(x) for x in v] if isinstance(v, (list, tuple)) else v

    return plain(dataclasses.asdict(cfg))


def save_config(cfg: Config, path: str | Path) -> None:
    """Write ``cfg`` as YAML atomically (a crash leaves the old file or the new one, never half)."""
    text = yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    commit_file(Path(path), lambda f: f.write(text.encode()))
