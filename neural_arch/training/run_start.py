"""Starting a run: join the process group, lock the run directory, build, resume.

Used by trainer.py::

    with claimed_run_dir(cfg) as run_dir:            # process group joined; rank 0 holds the lock
        components = build_components(cfg, create_data)
        resumed = resume_from(components, "auto", run_dir / "checkpoints")

Every function here is called on every rank and answers the same on every rank: a
question only rank 0 can answer (is the data there? is the directory free?) is answered by
rank 0 and shared, so no rank takes a different branch and waits in a collective alone.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, cast

import torch

import neural_arch.distributed as nd
from neural_arch.distributed.checkpoint import load_checkpoint
from neural_arch.training.components import TrainingComponents
from neural_arch.training.config import Config, validate_config
from neural_arch.training.finished_run import finished_at, finished_summary, nothing_to_do_line
from neural_arch.training.init_from import init_weights_from
from neural_arch.training.layout_check import check_offload_device, layout_active
from neural_arch.training.malloc import return_large_frees
from neural_arch.training.registry import task_class
from neural_arch.training.rng import seed_rank
from neural_arch.training.run_lock import RunDirLock
from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError

LARGE_BLOCK = 32 << 10
"""Bytes from which a sharded layout's allocations get their own mapping (malloc.py). Low: a
sharded rank's blocks and shards are mostly between 32 KiB and a few MiB, and kept in the heap
they fragment it (benchmarks/memory/README.md has the measurement); a mapping costs a system call
and fresh pages, negligible beside the tensor work it holds."""


@contextlib.contextmanager
def claimed_run_dir(cfg: Config) -> Iterator[Path]:
    """Join the process group; rank 0 locks ``cfg.run.dir`` for the ``with`` body. Every rank
    raises the same one-line ConfigError when another job holds it."""
    training = cfg.training
    nd.init_process_group(backend=None if training.backend == "auto" else training.backend, timeout=training.timeout)
    run_dir, lock, refused = Path(cfg.run.dir), None, None
    if nd.get_rank() == 0:
        try:
            lock = RunDirLock.acquire(run_dir)
        except ConfigError as exc:
            refused = str(exc)
    refused = cast(Optional[str], nd.all_gather_object(refused)[0])  # rank 0's
    if refused is not None:
        raise ConfigError(refused)
    try:
        yield run_dir
    finally:
        if lock is not None:
            lock.release()


def build_components(cfg: Config, create_data: bool) -> TrainingComponents:
    """Check the config against the world that started, create the data if asked, seed, build."""
    # torchrun/srun may start a world the config did not name; free when the CLI checked this world already
    validate_config(cfg, world_size=nd.get_world_size())
    device = torch.device("cuda", torch.cuda.current_device()) if nd.get_backend() == "nccl" else torch.device("cpu")
    check_offload_device(cfg.parallel, device, nd.get_backend())
    if layout_active(cfg.parallel):  # gathered blocks come and go every step: return them (malloc.py)
        return_large_frees(LARGE_BLOCK)
    task = task_class(cfg.run.task)
    if create_data and _data_missing_on_rank_0(task, cfg):
        task.create_data(cfg)  # collective: every rank writes its share
    seed_rank(cfg.run.seed, nd.get_rank())
    return TrainingComponents.build(cfg, device)


def _data_missing_on_rank_0(task: type[Task], cfg: Config) -> bool:
    """Rank 0's answer, on every rank: a rank asking later could find the store that rank 0 has
    begun to create and skip the (collective) creation. A store rank 0 refuses (ConfigError:
    damaged, wrong layout) is refused on every rank with the same line."""
    answer: tuple[bool, Optional[str]] = (False, None)
    if nd.get_rank() == 0:
        try:
            answer = (task.data_missing(cfg) is not None, None)
        except ConfigError as exc:
            answer = (False, str(exc))
    missing, refused = cast(tuple[bool, Optional[str]], nd.all_gather_object(answer)[0])
    if refused is not None:
        raise ConfigError(refused)
    return missing


def resume_from(
    components: TrainingComponents, resume: str, checkpoints: Path, callbacks: Sequence[object] = ()
) -> Optional[int]:
    """Restore the checkpoint ``resume`` names (``auto``: the newest usable one in ``checkpoints``,
    ``none``, or a path); the step it was taken at, or None when nothing was restored.

    A callback with ``restore_training(components, allowed)`` (memory_snapshot.py) is asked first
    (``allowed``: ``resume`` is ``auto``); a step it restored wins over the disk.

    With ``auto``, a checkpoint that loads but cannot be restored into this run (another
    model's shapes, a shard entry refused as unsafe) is skipped with one warning naming it and
    why, like a damaged one, and the next older one is tried; if none fits, a one-line
    ``ConfigError`` (training from scratch would prune the checkpoints that are there).
    """
    for callback in callbacks:
        restore = getattr(callback, "restore_training", None)
        if restore is not None and (step := restore(components, resume == "auto")) is not None:
            return cast(int, step)
    if resume == "none":
        return None
    found = load_checkpoint(checkpoints if resume == "auto" else Path(resume))
    if found is None and resume != "auto":
        raise ConfigError(f"--resume {resume}: no checkpoint there; use --resume auto or none.")
    why = None
    while found is not None:
        info, state = found
        why = _restore_failure(components, state, info.path)
        if why is None:
            steps = components.cfg.training.steps
            done = info.step >= steps or finished_at(info.step, steps, checkpoints.parent, resume)  # an early stop
            if nd.get_rank() == 0 and not done:
                print(f"resuming from step {info.step} of {steps} (checkpoint {info.path})", flush=True)
            return info.step
        if resume != "auto":
            raise ConfigError(f"--resume {resume}: checkpoint {info.path} cannot be restored into this run ({why})")
        found = load_checkpoint(checkpoints, before=info.step)
        if nd.get_rank() == 0 and found is not None:
            warnings.warn(
                f"checkpoint {info.path} cannot be restored into this run ({why}); "
                f"falling back to step {found[0].step}",
                RuntimeWarning,
                stacklevel=2,
            )
    if why is not None:
        raise ConfigError(
            f"no checkpoint in {checkpoints} can be restored into this run (the oldest: {why}); it was written by "
            "another model or config: use another run.dir, or --resume none to start over (it prunes them)"
        )
    return None


def _restore_failure(components: TrainingComponents, state: dict[str, Any], step_dir: Path) -> Optional[str]:
    """Restore ``state``; None if it worked on every rank, else why not (the same on every rank)."""
    try:
        components.restore(state, components.cfg.run.seed, step_dir)
        why = None
    except Exception as exc:  # noqa: BLE001 - whatever fails, this checkpoint does not fit: fall back, naming it
        text = " ".join(str(exc).split()) or type(exc).__name__
        why = text if len(text) <= 1000 else text[:997] + "..."  # one line, even for torch's long ones
    return next((cast(str, w) for w in nd.all_gather_object(why) if w is not None), None)


def finished_run_metrics(components: TrainingComponents, run_dir: Path) -> dict[str, float]:
    """A finished run started again: say so and touch none of its outputs; its final metrics."""
    steps = components.cfg.training.steps
    if nd.get_rank() == 0:
        print(nothing_to_do_line(components.step, steps, run_dir), flush=True)
    values = finished_summary(run_dir) or {}
    return {k: float(v) for k, v in values.items() if "/" in k and isinstance(v, (int, float))}


def weights_from(components: TrainingComponents, path: str) -> None:
    """``run.init_from``: this fresh run starts from the weights of ``path``'s newest checkpoint."""
    step = init_weights_from(components, path)
    if nd.get_rank() == 0:
        print(f"initialised the model from {path} (saved at its step {step}); optimizer and schedule start anew")
