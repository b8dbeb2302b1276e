"""Run the trainer, or your own script, as the training function of Ray Train's ``TorchTrainer``.

Use (``pip install 'neural_arch[ray]'``; docs/ray.md runs this on a local Ray cluster)::

    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from neural_arch.integrations.ray import train_loop_per_worker

    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"config": "tiny", "overrides": ["training.steps=40"]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(storage_path="/shared/ray", name="tiny", failure_config=FailureConfig(max_failures=3)),
    )
    result = trainer.fit()  # result.checkpoint: our newest checkpoint, copied by Ray; result.metrics: its step, val/*

``script_loop_per_worker`` runs a script file instead, as ``python script.py ARGS`` would run it
on each worker: ``train_loop_config={"script": "/abs/train.py", "args": ["--epochs", "3"]}``.

What equals what. Ray Train starts the workers and joins them in a process group before the
training function runs; ``neural_arch.distributed.init_process_group()`` (the trainer's, or your
script's) adopts that group, so N Ray workers compute what N ranks under our launcher or
torchrun compute, and what one process computes (exactly, up to summation order).

Restarts are Ray's. A failed worker makes Ray Train end the whole worker group and start a new
one while ``FailureConfig(max_failures)`` allows (our launcher is not involved). The run
directory is therefore on storage every worker sees and the same for every attempt: a relative
``run.dir`` (the recipes' ``runs/...``) is placed in Ray's run directory,
``<storage_path>/<name>/<run.dir>``; an absolute one is used as it is. ``checkpoint.resume:
auto`` then continues the new group from our newest checkpoint, as if nothing had failed.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Optional

try:
    import ray.train
except ImportError as missing:  # the optional extra
    raise ImportError(
        f"neural_arch.integrations.ray needs Ray Train ({missing}): pip install 'neural_arch[ray]'"
    ) from None

import neural_arch.distributed as nd
from neural_arch.integrations.ray_report import PeerLost, RayReport, explained, script_reports
from neural_arch.training.config import Config, load_config
from neural_arch.training.trainer import train
from neural_arch.training.typed_config import ConfigError

TRAINER_KEYS = ("config", "overrides", "callbacks", "create_data", "report_checkpoints")
"""What ``train_loop_per_worker`` reads from ``train_loop_config``."""
SCRIPT_KEYS = ("script", "args", "report_checkpoints")
"""What ``script_loop_per_worker`` reads from ``train_loop_config``."""


def train_loop_per_worker(config: Mapping[str, Any]) -> dict[str, float]:
    """Train with neural_arch's trainer on this Ray Train worker; returns the final metrics.

    ``config`` (``TorchTrainer(train_loop_config=...)``): ``config``, a recipe's name or a YAML
    path (default: the built-in defaults); ``overrides``, ``section.key=value`` strings as after
    ``--set``; ``callbacks``, trainer callbacks (``neural_arch.training.callbacks.Callback``);
    ``create_data``, create the task's data first if missing; ``report_checkpoints`` (default
    True), attach our checkpoints to Ray's reports (else metrics only). The argument is required:
    Ray calls a training function that has a default for it without its ``train_loop_config``."""
    options = _options(config, TRAINER_KEYS)
    cfg = run_config(options.get("config"), list(options.get("overrides", ())))
    reporter = RayReport(attach=bool(options.get("report_checkpoints", True)))
    callbacks = [reporter, *options.get("callbacks", ())]
    resumes = f"resumes from {Path(cfg.run.dir) / 'checkpoints'}"
    with _failure_explained(resumes, lambda: reporter.last_saved):
        return train(cfg, callbacks=callbacks, create_data=bool(options.get("create_data", False)))


def script_loop_per_worker(config: Mapping[str, Any]) -> None:
    """Run a script file on this Ray Train worker as ``python SCRIPT ARGS...`` would.

    ``config``: ``script``, the file (absolute, or relative to the driver's directory when the
    workers share it: Ray starts each worker in a directory of its own); ``args``, its
    arguments; ``report_checkpoints`` (default True), report each checkpoint it saves with
    ``neural_arch.distributed.save_checkpoint``/``save_sharded`` to Ray. The script's
    ``init_process_group()`` adopts Ray's group; ``sys.exit(0)`` is success, another code fails
    this worker with the code in one line."""
    options = _options(config, SCRIPT_KEYS)
    if "script" not in options:
        raise ConfigError("script_loop_per_worker: train_loop_config has no 'script' (the script file to run)")
    script = Path(str(options["script"]))
    if not script.is_file():
        raise ConfigError(
            f"script_loop_per_worker: script={str(script)!r} is not a file on this worker (its directory is "
            f"{Path.cwd()}); pass an absolute path on storage every worker sees"
        )
    rank, world = nd.get_rank(), nd.get_world_size()
    newest = script_reports(rank, attach=bool(options.get("report_checkpoints", True)))
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *[str(a) for a in options.get("args", ())]]
    sys.path.insert(0, str(script.resolve().parent))  # as `python script.py` would
    try:
        with _failure_explained(f"runs {script.name} again (from its checkpoint if it loads one)", lambda: newest[0]):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as done:
        if done.code not in (None, 0):
            raise RuntimeError(f"{script.name} on rank {rank} of {world} exited with code {done.code}") from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def run_config(config: Optional[str], overrides: list[str]) -> Config:
    """The run's config with ``run.dir`` made absolute on Ray's storage (see the module docstring)."""
    world = nd.get_world_size()
    cfg = load_config(config, overrides, world_size=world)
    if cfg.checkpoint.resume == "none":
        raise ConfigError(
            "checkpoint.resume=none under Ray Train would start every restarted worker group from step 0; "
            "use checkpoint.resume=auto (the default), and a new RunConfig(name=...) for a fresh run"
        )
    if Path(cfg.run.dir).is_absolute():
        return cfg
    return load_config(config, [*overrides, f"run.dir={ray_run_dir() / cfg.run.dir}"], world_size=world)


def ray_run_dir() -> Path:
    """Ray's run directory (``<storage_path>/<name>``) as a path on this worker, if it is one."""
    storage = ray.train.get_context().get_storage()
    if storage.storage_filesystem.type_name != "local":
        raise ConfigError(
            f"run.dir is relative, and Ray's storage_path is on {storage.storage_filesystem.type_name} storage, "
            "which our checkpoints cannot be written to as files; set run.dir to an absolute path on a "
            "filesystem every worker mounts"
        )
    return Path(PurePosixPath(storage.experiment_fs_path))


@contextmanager
def _failure_explained(resumes: str, last_saved: Callable[[], Optional[int]]) -> Iterator[None]:
    """Re-raise a worker's error caused by another worker's death as ``PeerLost``, in one line."""
    try:
        yield
    except PeerLost:
        raise
    except Exception as exc:
        line = explained(exc, nd.get_rank(), nd.get_world_size(), resumes, last_saved())
        if line is None:
            raise
        raise PeerLost(line) from exc


def _options(config: Optional[Mapping[str, Any]], known: tuple[str, ...]) -> Mapping[str, Any]:
    """``train_loop_config`` with its keys checked (a misspelt key is an error, not a default)."""
    options = dict(config or {})
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"train_loop_config has unknown keys {unknown}; known keys: {', '.join(known)}")
    return options
