"""Typed training configuration: defaults < YAML file < ``--set section.key=value``.

Use: ``cfg = load_config("configs/tiny.yaml", ["optim.lr=0.1", "training.steps=50"])``;
``save_config(cfg, "runs/x/config.yaml")`` writes YAML that loads back to an equal ``Config``.

Loading is generic: the dataclasses below are the schema (types from their annotations,
choices from ``Literal``), so adding a field needs no loader code, only a range rule if it
has one. Every mistake raises ``ConfigError`` with one line naming the key path, the bad
value, what is allowed and, for names, the closest valid one.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence

import yaml

from neural_arch.training.typed_config import ConfigError, build, names, show, unknown


@dataclass
class RunConfig:
    name: str = "run"
    """Run name, used in logs and metric files."""
    dir: str = "runs/run"
    """Directory for checkpoints, metrics and the saved config."""
    seed: int = 0
    """Seed for weights and data order (same seed => same run at any world size)."""


@dataclass
class ModelConfig:
    name: Literal["mlp", "icenet"] = "mlp"
    """Model architecture: a small MLP (regression data) or the IceNet-style U-Net (sea-ice data)."""
    hidden: int = 32
    """MLP: hidden layer width."""
    depth: int = 2
    """MLP: number of hidden layers."""
    widths: list[int] = field(default_factory=lambda: [16, 32, 64])
    """U-Net: channels per level (its depth is the list's length)."""
    dropout: float = 0.0
    """U-Net: dropout probability in the decoder."""


@dataclass
class DataConfig:
    name: Literal["synthetic", "file", "icenet"] = "synthetic"
    """Dataset: regression data generated on the fly, read from ``path``, or the sea-ice store at ``path``."""
    path: Optional[str] = None
    """Dataset file (``file``; must exist) or zarr store (``icenet``; made by create-data)."""
    grid: int = 48
    """icenet: cells per side of the polar grid."""
    years: int = 25
    """icenet: years of monthly data."""
    val_years: int = 5
    """icenet: the last years, used for validation."""
    lags: int = 3
    """icenet: past months of ice concentration in the input."""
    leads: int = 3
    """icenet: months ahead to forecast."""
    num_samples: int = 256
    """Training samples (synthetic data)."""
    val_samples: int = 64
    """Validation samples (synthetic data); 0 disables validation."""
    features: int = 8
    """Input features per sample."""
    targets: int = 1
    """Output values per sample."""
    noise: float = 0.1
    """Standard deviation of the noise added to synthetic targets."""


@dataclass
class OptimConfig:
    name: Literal["sgd", "adam", "adamw"] = "sgd"
    """Optimizer."""
    lr: float = 0.05
    """Peak learning rate (reached after warmup)."""
    momentum: float = 0.9
    """SGD momentum."""
    weight_decay: float = 0.0
    """L2 penalty (sgd, adam) or decoupled weight decay (adamw)."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam/AdamW moment decay rates."""


@dataclass
class ScheduleConfig:
    warmup_steps: int = 0
    """Steps of linear warmup from 0 to ``optim.lr``."""
    decay: Literal["cosine", "constant"] = "cosine"
    """Learning-rate shape after warmup."""
    min_lr_ratio: float = 0.0
    """Final learning rate as a fraction of ``optim.lr`` (cosine decay)."""


@dataclass
class TrainingConfig:
    steps: int = 100
    """Total optimizer steps."""
    global_batch_size: int = 32
    """Samples per optimizer step, summed over all ranks and accumulation micro-steps."""
    grad_accum_steps: int = 1
    """Micro-batches accumulated per optimizer step; must divide ``global_batch_size``."""
    distributed: bool = False
    """Run under a process group (started by the launcher)."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """Collective backend; ``auto`` picks nccl on GPUs, gloo on CPU."""
    nproc_per_node: int = 1
    """Worker processes per node when the run starts its own launcher."""
    max_restarts: int = 3
    """Times a failed group is restarted from the last checkpoint before giving up."""
    precision: Literal["fp32", "fp64", "bf16", "fp16"] = "fp32"
    """Compute precision."""
    grad_clip: Optional[float] = None
    """Clip the global gradient norm to this value; null disables clipping."""
    val_every: int = 0
    """Validate every N steps; 0 = only at the end."""
    nan_policy: Literal["stop", "skip"] = "stop"
    """On a non-finite loss: stop with an error, or skip that step on every rank."""
    timeout: float = 600.0
    """Collective timeout in seconds, so a dead peer fails the run instead of hanging it."""


@dataclass
class CheckpointConfig:
    every_steps: int = 100
    """Save every N steps; 0 = only at the end (a save costs about 2 short steps: see benchmarks/README.md)."""
    keep_last: int = 3
    """Checkpoints kept on disk (older ones are deleted after a successful save)."""
    resume: str = "auto"
    """``auto`` (newest in run.dir if any), ``none`` (start fresh) or a checkpoint path."""


@dataclass
class LoggingConfig:
    every_steps: int = 10
    """Log metrics every N steps."""
    progress: bool = True
    """Show a progress bar on rank 0."""
    tensorboard: bool = True
    """Write TensorBoard event files to run.dir."""
    record_samples: bool = False
    """Append each step's sample ids to logs/samples_rank_N.jsonl (for auditing resumes)."""


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    """Naming, output directory, seed."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Model architecture."""
    data: DataConfig = field(default_factory=DataConfig)
    """Dataset."""
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


# ---- range rules: key path -> (predicate, what is allowed); None values are skipped.
def _ge(lo: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v >= lo), f">= {lo}"


_UNIT = (lambda v: 0 <= v <= 1), "between 0 and 1"
_POSITIVE = (lambda v: v > 0), "> 0"
_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model.hidden": _ge(1), "model.depth": _ge(1),
    "model.widths": ((lambda v: all(w >= 1 for w in v)), "a list of positive channel counts"),
    "model.dropout": ((lambda v: 0 <= v < 1), "in [0, 1)"),
    "data.grid": _ge(8), "data.years": _ge(2), "data.val_years": _ge(1), "data.lags": _ge(1), "data.leads": _ge(1),
    "data.num_samples": _ge(1), "data.val_samples": _ge(0), "data.features": _ge(1),
    "data.targets": _ge(1), "data.noise": _ge(0),
    "optim.lr": _POSITIVE, "optim.momentum": _UNIT, "optim.weight_decay": _ge(0),
    "optim.betas": ((lambda v: all(0 <= b < 1 for b in v)), "two numbers in [0, 1)"),
    "schedule.warmup_steps": _ge(0), "schedule.min_lr_ratio": _UNIT,
    "training.steps": _ge(1), "training.global_batch_size": _ge(1), "training.grad_accum_steps": _ge(1),
    "training.nproc_per_node": _ge(1), "training.max_restarts": _ge(0),
    "training.grad_clip": ((lambda v: v > 0), "> 0 (or null to disable clipping)"),
    "training.val_every": _ge(0), "training.timeout": _POSITIVE,
    "checkpoint.every_steps": _ge(0), "checkpoint.keep_last": _ge(1),
    "checkpoint.resume": ((lambda v: v != ""), "'auto', 'none' or a checkpoint path"),
    "logging.every_steps": _ge(1),
}


def load_config(path: Optional[str | Path] = None, overrides: Sequence[str] = (), *,
                world_size: Optional[int] = None) -> Config:
    """Defaults, then the YAML file at ``path`` (if any), then ``overrides``, then validation.

    ``world_size``: ranks the run will use, for the batch divisibility check; when None and
    ``training.distributed`` is true, ``training.nproc_per_node`` stands in for it.
    """
    raw = _read_yaml(Path(path)) if path is not None else {}
    for text in overrides:
        _apply_override(raw, text)
    cfg = build(Config, raw, "")
    validate_config(cfg, world_size=world_size)
    return cfg


def validate_config(cfg: Config, *, world_size: Optional[int] = None) -> None:
    """Range and cross-field checks; the trainer can repeat them once the real world size is known."""
    for key, (ok, allowed) in _RANGES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is not None and not ok(value):
            raise ConfigError(f"{key}={show(value)} is out of range: must be {allowed}")
    data, t = cfg.data, cfg.training
    if data.name == "icenet" and data.path is None:
        raise ConfigError("data.path=null but data.name is 'icenet': set data.path to the zarr store "
                          "(created by `neural-arch create-data --config FILE`)")
    if data.name == "icenet" and data.val_years >= data.years:
        raise ConfigError(f"data.val_years={data.val_years} must be smaller than data.years={data.years}")
    if (data.name == "icenet") != (cfg.model.name == "icenet"):
        raise ConfigError(f"model.name={cfg.model.name!r} does not fit data.name={data.name!r}: the icenet "
                          "model trains on icenet data, the mlp on synthetic or file data")
    if data.name == "file" and data.path is None:
        raise ConfigError("data.path=null but data.name is 'file': add 'path: FILE' under 'data:' in the "
                          "YAML, or pass --set data.path=FILE (or use data.name=synthetic)")
    if data.name == "file" and not Path(data.path).exists():
        raise ConfigError(f"data.path={data.path!r} does not exist (relative paths start at "
                          f"{os.getcwd()}); fix the path or create the data file first")
    if t.global_batch_size % t.grad_accum_steps:
        raise ConfigError(f"training.global_batch_size={t.global_batch_size} is not divisible by training."
                          f"grad_accum_steps={t.grad_accum_steps}; use a multiple of {t.grad_accum_steps}")
    if world_size is None and t.distributed and t.nproc_per_node > 1:
        world_size = t.nproc_per_node
    if world_size is not None and world_size < 1:
        raise ConfigError(f"world_size={world_size!r}: must be >= 1")
    unit = (world_size or 1) * t.grad_accum_steps
    if t.global_batch_size % unit:
        raise ConfigError(f"training.global_batch_size={t.global_batch_size} is not divisible by world size "
                          f"{world_size} x grad_accum_steps {t.grad_accum_steps}; use a multiple of {unit}")


def config_to_dict(cfg: Config) -> dict:
    """A plain dict of builtins (tuples become lists) that ``yaml.safe_dump`` accepts."""
    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return [plain(x) for x in v] if isinstance(v, (list, tuple)) else v
    return plain(dataclasses.asdict(cfg))


def save_config(cfg: Config, path: str | Path) -> None:
    """Write ``cfg`` as YAML, via a temporary file and a rename so a crash leaves no half file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False))
    os.replace(tmp, path)


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(e, 'problem', None) or e}") from None
    if data is None:  # an empty file means "all defaults"
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections "
                          f"({', '.join(names(Config))}), got {show(data)} ({type(data).__name__})")
    return data


def _apply_override(raw: dict, text: str) -> None:
    """Set one ``section.key=value`` into the raw nested dict; the key path is checked first."""
    key, sep, value_text = str(text).partition("=")
    section, dot, name = key.strip().partition(".")
    if not (sep and dot and section and name):
        raise ConfigError(f"malformed override {text!r}: expected section.key=value, e.g. optim.lr=0.1")
    if section not in names(Config):
        unknown("", section, Config)
    cls = typing.get_type_hints(Config)[section]
    if name not in names(cls):
        unknown(section, name, cls)
    tp = typing.get_type_hints(cls)[name]
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else None
    except yaml.YAMLError:
        value = value_text  # not YAML (e.g. "a: b: c"); the type check rejects it where wrong
    # A str field takes the text verbatim: run.name=2024 is a name, not the int 2024.
    if value is not None and not isinstance(value, str) and str in (tp, *typing.get_args(tp)):
        value = value_text.strip()
    if raw.get(section) is None:
        raw[section] = {}
    if not isinstance(raw[section], dict):
        raise ConfigError(f"{section}: expected a mapping, got {show(raw[section])}; cannot apply --set {key}")
    raw[section][name] = value
