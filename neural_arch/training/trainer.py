"""The training loop behind ``neural-arch train``: exact on any number of ranks, resumable.

Run: ``neural-arch train --config configs/tiny.yaml --nproc-per-node 2`` or, in Python,
``train(load_config("configs/tiny.yaml"))`` under any launcher (or none).

Every optimizer step consumes one global batch of the world-size-invariant sampler; each
rank's share is split into ``grad_accum_steps`` micro-batches (all but the last under
``no_sync``) and weighted by the global batch size, so the update equals one process's
on the same batch. Checkpoints hold everything needed to continue mid-epoch with the same
result: weights, optimizer, scheduler, scaler, sampler position, step, every rank's RNG.
``train`` reads top to bottom: set up, loop over global batches, finish.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Optional

import torch

import neural_arch.distributed as nd
from neural_arch.distributed.checkpoint import load_checkpoint, save_checkpoint
from neural_arch.distributed.checkpoint.layout import step_name
from neural_arch.training.components import TrainingComponents
from neural_arch.training.config import Config, save_config, validate_config
from neural_arch.training.heap import frozen_heap
from neural_arch.training.registry import task_class
from neural_arch.training.reporting import RunReporter, format_summary, plot_losses
from neural_arch.training.rng import seed_rank
from neural_arch.training.run_lock import RunDirLock
from neural_arch.training.sample_log import append_samples, forget_samples_after
from neural_arch.training.prefetch import Prefetcher, next_batch
from neural_arch.training.step import evaluate, step_inputs, train_step
from neural_arch.training.typed_config import ConfigError
from neural_arch.training.stop import StopSignals, TrainingStopped, requeue_if_asked


@dataclass
class LoopRecord:
    """What the loop measures on the way: throughput, step times, the last checkpoint and loss."""

    resumed_from: Optional[int]
    started: float = field(default_factory=time.perf_counter)
    samples: int = 0
    step_times: list[float] = field(default_factory=list)
    since_log: torch.Tensor = field(default_factory=lambda: torch.zeros(2, dtype=torch.float64))
    """(loss sum, samples) on this rank since the last metrics row."""
    loss: float = float("nan")
    """The exact global mean training loss of the last metrics row."""
    last_saved: Optional[int] = None
    validated: Optional[tuple[int, dict[str, float]]] = None
    """(step, metrics) of the last validation pass, so the end of the run does not repeat it."""


def train(cfg: Config, *, resume: Optional[str] = None, on_step: Optional[Callable[[int], None]] = None,
          create_data: bool = False) -> dict[str, float]:
    """Train to ``cfg.training.steps``; returns the final metrics (identical on every rank).

    ``resume``: ``auto``/``none``/a checkpoint path (default: ``checkpoint.resume``).
    ``on_step(step)`` is called after every step (tests use it to inject faults).
    ``create_data``: first create the task's data if it is missing (every rank takes part).
    """
    # ---- set up: process group, run directory (locked: one job per directory), data, model, resume
    lock, run_dir = _claim_run_dir(cfg)
    try:
        return _train(cfg, run_dir, resume, on_step, create_data)
    finally:
        if lock is not None:
            lock.release()


def _train(cfg: Config, run_dir: Path, resume: Optional[str], on_step: Optional[Callable[[int], None]],
           create_data: bool) -> dict[str, float]:
    parts = _set_up(cfg, create_data)
    resumed = _resume(parts, resume or cfg.checkpoint.resume, run_dir / "checkpoints")
    if resumed is not None and parts.step >= cfg.training.steps:
        return _nothing_to_do(parts, run_dir)
    if nd.get_rank() == 0:
        save_config(cfg, run_dir / "config.yaml")
    report = RunReporter(run_dir, nd.get_rank(), cfg.training.steps, parts.step, cfg.logging.progress, cfg.logging.tensorboard)
    report.log.info("start: world %d, step %d%s", nd.get_world_size(), parts.step,
                    f" (resumed from step {resumed})" if resumed else "")
    if cfg.logging.record_samples and nd.get_rank() == 0:
        forget_samples_after(run_dir, parts.step)  # steps past the checkpoint are trained again now
    record = LoopRecord(resumed_from=resumed, last_saved=resumed)
    # ---- loop: one global batch per optimizer step, epoch after epoch; a stop signal ends it saved
    with StopSignals() as stop, Prefetcher(partial(step_inputs, parts), enabled=cfg.training.prefetch) as ahead, \
            frozen_heap():  # full GC passes skip set-up's objects (heap.py)
        while parts.step < cfg.training.steps:
            for batch in parts.sampler:
                _one_step(parts, batch, ahead, record, report, run_dir)
                if on_step is not None:
                    on_step(parts.step)
                signum = stop.agreed(force=_slow_or_last(cfg, parts.step))
                if signum is not None:
                    _stop(parts, record, report, run_dir, signum)
                if parts.step >= cfg.training.steps:
                    break
            else:
                parts.sampler.set_epoch(parts.sampler.epoch + 1)
    # ---- finish: final validation, last checkpoint, outputs
    return _finish(parts, record, report, run_dir)


def _slow_or_last(cfg: Config, step: int) -> bool:
    """Whether ``step`` was the last, or validated or saved a checkpoint (the same on every rank):
    ranks then agree on stop signals at once, so none is lost at the end or delayed by a slow step."""
    val, every = cfg.training.val_every, cfg.checkpoint.every_steps
    return step >= cfg.training.steps or bool(val and step % val == 0) or bool(every and step % every == 0)


def _claim_run_dir(cfg: Config) -> tuple[Optional[RunDirLock], Path]:
    """Join the process group; rank 0 locks the run directory for the job's life. Every rank
    raises the same one-line ConfigError when another job holds it."""
    training = cfg.training
    nd.init_process_group(backend=None if training.backend == "auto" else training.backend, timeout=training.timeout)
    run_dir, lock, refused = Path(cfg.run.dir), None, None
    if nd.get_rank() == 0:
        try:
            lock = RunDirLock.acquire(run_dir)
        except ConfigError as exc:
            refused = str(exc)
    refused = nd.all_gather_object(refused)[0]
    if refused is not None:
        raise ConfigError(refused)
    return lock, run_dir


def _set_up(cfg: Config, create_data: bool) -> TrainingComponents:
    rank = nd.get_rank()
    validate_config(cfg, world_size=nd.get_world_size())  # again: torchrun/srun may start a world the config did not name
    device = torch.device("cuda", torch.cuda.current_device()) if nd.get_backend() == "nccl" else torch.device("cpu")
    task = task_class(cfg.run.task)
    if create_data and _data_missing_on_rank_0(task, cfg):
        task.create_data(cfg)  # collective: every rank writes its share
    seed_rank(cfg.run.seed, rank)
    return TrainingComponents.build(cfg, device)


def _data_missing_on_rank_0(task: type, cfg: Config) -> bool:
    """Rank 0's answer, on every rank: a rank asking later could find the store that rank 0 has
    begun to create and skip the (collective) creation. A store rank 0 refuses (ConfigError:
    damaged, wrong layout) is refused on every rank with the same line."""
    answer: tuple[bool, Optional[str]] = (False, None)
    if nd.get_rank() == 0:
        try:
            answer = (task.data_missing(cfg) is not None, None)
        except ConfigError as exc:
            answer = (False, str(exc))
    missing, refused = nd.all_gather_object(answer)[0]
    if refused is not None:
        raise ConfigError(refused)
    return missing


def _resume(parts: TrainingComponents, resume: str, ckpt_dir: Path) -> Optional[int]:
    """Restore the checkpoint ``resume`` names; the step it was taken at, or None."""
    if resume == "none":
        return None
    found = load_checkpoint(ckpt_dir if resume == "auto" else Path(resume))
    if found is None:
        if resume != "auto":
            raise ConfigError(f"--resume {resume}: no checkpoint there; use --resume auto or none.")
        return None
    info, state = found
    parts.restore(state, parts.cfg.run.seed, info.path)
    if nd.get_rank() == 0 and parts.step < parts.cfg.training.steps:
        print(f"resuming from step {info.step} of {parts.cfg.training.steps} (checkpoint {info.path})", flush=True)
    return info.step


def _nothing_to_do(parts: TrainingComponents, run_dir: Path) -> dict[str, float]:
    """A finished run started again: say so and touch none of its outputs; its final metrics."""
    steps = parts.cfg.training.steps
    if nd.get_rank() == 0:
        print(f"already at step {parts.step} of {steps}; nothing to do (use --resume none or a new run.dir to "
              "start over, or raise training.steps to train on)", flush=True)
    summary = run_dir / "summary.json"
    values = json.loads(summary.read_text()) if summary.exists() else {}
    return {k: float(v) for k, v in values.items() if "/" in k}


def _stop(parts: TrainingComponents, record: LoopRecord, report: RunReporter, run_dir: Path, signum: int) -> None:
    """Save at this step (every rank agreed on the signal) and leave with ``TrainingStopped``."""
    if record.last_saved != parts.step:
        _save(parts, run_dir, None)
    checkpoint = run_dir / "checkpoints" / step_name(parts.step)
    report.log.info("stopped by signal %d at step %d; checkpoint %s", signum, parts.step, checkpoint)
    report.close()
    requeue_if_asked(parts.cfg.checkpoint.requeue_on_stop, signum)
    raise TrainingStopped(signum, parts.step, parts.cfg.training.steps, str(checkpoint))


def _one_step(parts: TrainingComponents, batch: nd.IndexBatch, ahead: Prefetcher[list[dict[str, torch.Tensor]]],
              record: LoopRecord, report: RunReporter, run_dir: Path) -> None:
    """Train on one global batch, then log, validate and checkpoint when they are due."""
    cfg = parts.cfg
    tick = time.perf_counter()
    inputs = ahead.take(batch)
    if parts.step + 1 < cfg.training.steps:  # the next step's data builds while this one computes
        ahead.start(next_batch(parts.sampler))
    record.since_log += train_step(parts, batch, inputs)
    parts.step += 1
    record.step_times.append(time.perf_counter() - tick)
    record.samples += batch.global_size
    if cfg.logging.record_samples and parts.placement.leader:  # tensor/pipeline peers saw the same ids
        append_samples(run_dir, nd.get_rank(), parts.step, list(batch))
    row: dict[str, float] = {}
    if cfg.training.val_every and parts.step % cfg.training.val_every == 0:
        row.update(evaluate(parts))
        record.validated = (parts.step, dict(row))
    if parts.step % cfg.logging.every_steps == 0 or row or parts.step == cfg.training.steps:
        # One small all-reduce per log row: the exact mean loss over the interval.
        total = nd.all_reduce(record.since_log, check=False)
        record.loss = float(total[0] / total[1])
        record.since_log.zero_()
        row = {"train/loss": record.loss, "lr": parts.scheduler.get_last_lr()[0], "epoch": float(parts.sampler.epoch), **row}
        report.metrics(parts.step, row)
    report.progress(parts.step, record.loss, record.samples / (time.perf_counter() - record.started))
    every = cfg.checkpoint.every_steps
    if every and parts.step % every == 0 and parts.step < cfg.training.steps:
        _save(parts, run_dir, row.get("val/loss"))
        record.last_saved = parts.step


def _save(parts: TrainingComponents, run_dir: Path, metric: Optional[float]) -> None:
    save_checkpoint(run_dir / "checkpoints", parts.step, parts.checkpoint_state(),
                    keep_last=parts.cfg.checkpoint.keep_last, metric=metric, shards=parts.shard_state())


def _finish(parts: TrainingComponents, record: LoopRecord, report: RunReporter, run_dir: Path) -> dict[str, float]:
    """Final validation and checkpoint (every rank), then the run's outputs (rank 0)."""
    train_seconds = time.perf_counter() - record.started
    already = record.validated is not None and record.validated[0] == parts.step
    final = record.validated[1] if already else evaluate(parts)  # type: ignore[index]
    if record.last_saved != parts.step:
        _save(parts, run_dir, final.get("val/loss"))
    times = record.step_times
    mean_max = torch.tensor([sum(times) / max(len(times), 1), max(times, default=0.0)], dtype=torch.float64)
    per_rank = [(float(a), float(b)) for a, b in nd.all_gather(mean_max)]
    if final and not already:  # the last step's row holds them already
        report.metrics(parts.step, final)
    report.close()
    whole = parts.placement.whole_model(parts.task)  # collective for sharded layouts
    if nd.get_rank() == 0:
        throughput = {"processes": float(nd.get_world_size()), "samples_per_s": record.samples / max(train_seconds, 1e-9),
                      "train_seconds": train_seconds, "steps": float(len(times))}
        _write_outputs(parts, whole, run_dir, final, throughput, record.samples, per_rank)
    return final


def _write_outputs(parts: TrainingComponents, whole: torch.nn.Module, run_dir: Path, final: dict[str, float],
                   throughput: dict[str, float], samples: int, per_rank: list[tuple[float, float]]) -> None:
    """Rank 0: loss plot, the task's report, summary.txt/summary.json, the summary on stdout."""
    if (run_dir / "metrics.jsonl").exists():
        plot_losses(run_dir / "metrics.jsonl", run_dir / "loss.png")
    parts.task.report(run_dir, whole, final, throughput)
    summary = format_summary(parts.task.summary_metrics(final), throughput["train_seconds"], samples, per_rank,
                             nd.get_world_size())
    (run_dir / "summary.txt").write_text(summary + "\n")
    (run_dir / "summary.json").write_text(json.dumps({**throughput, **final}, indent=2) + "\n")
    print(summary, flush=True)
