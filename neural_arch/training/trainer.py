"""The training loop behind ``neural-arch train``: exact on any number of ranks, resumable.

Run: ``neural-arch train --config tiny --nproc-per-node 2`` or, in Python,
``train(load_config("tiny"))`` under any launcher (or none).

Every optimizer step consumes one global batch of the world-size-invariant sampler; each
rank's share is split into ``grad_accum_steps`` micro-batches (all but the last under
``no_sync``) and weighted by the global batch size, so the update equals one process's
on the same batch. Checkpoints hold everything needed to continue mid-epoch with the same
result: weights, optimizer, scheduler, scaler, sampler position, step, every rank's RNG.
``Trainer.train`` reads top to bottom: set up, then per step batch, forward/backward,
optimizer step, log, validate, save, stop; then finish.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import neural_arch.distributed as nd
from neural_arch.distributed.checkpoint import CheckpointWriter, record_metric
from neural_arch.distributed.checkpoint.layout import step_name
from neural_arch.training.batch_workers import batch_builder
from neural_arch.training.callbacks import Callback
from neural_arch.training.components import TrainingComponents
from neural_arch.training.config import Config, save_config
from neural_arch.training.finished_run import finished_at
from neural_arch.training.heap import frozen_heap
from neural_arch.training.interval_metrics import IntervalMeter, first_step_flops, rank_peak
from neural_arch.training.loss_plot import LossPlot
from neural_arch.training.prefetch import next_batch
from neural_arch.training.profiling import StepProfiler
from neural_arch.training.reporting import RunReporter
from neural_arch.training.run_callbacks import RunCallbacks
from neural_arch.training.run_end import run_throughput, step_times_per_rank, task_report, write_outputs
from neural_arch.training.run_progress import RunProgress, global_batches
from neural_arch.training.run_start import (
    build_components,
    claimed_run_dir,
    finished_run_metrics,
    resume_from,
    weights_from,
)
from neural_arch.training.sample_log import append_samples, forget_samples_after
from neural_arch.training.step import evaluate, forward_backward, optimizer_step
from neural_arch.training.stop import StopSignals, TrainingStopped, requeue_if_asked
from neural_arch.training.stragglers import StragglerWatch
from neural_arch.training.tracking import open_trackers


def train(
    cfg: Config,
    *,
    resume: Optional[str] = None,
    callbacks: Sequence[Callback] = (),
    on_step: Optional[Callable[[int], None]] = None,
    create_data: bool = False,
) -> dict[str, float]:
    """Train to ``cfg.training.steps`` (or until a callback stops it early); returns the final
    metrics (identical on every rank).

    ``resume``: ``auto``/``none``/a checkpoint path (default: ``checkpoint.resume``).
    ``callbacks``: ``Callback`` objects (callbacks.py): ``on_step``, ``on_validation``,
    ``on_save``, ``on_finish``; any of them may stop the run early.
    ``on_step(step)``: a plain function called after every step (as a callback's ``on_step``).
    ``create_data``: first create the task's data if it is missing (every rank takes part).
    """
    return Trainer(cfg, resume=resume, callbacks=callbacks, on_step=on_step, create_data=create_data).train()


class Trainer:
    """One training run: its config and, once ``train()`` has set it up, everything it updates."""

    run_dir: Path
    writer: CheckpointWriter
    """Saves checkpoints (in the background with ``checkpoint.async_save``, one at a time)."""
    components: TrainingComponents
    """The task, placed model, optimizer, schedule, scaler, sampler and step count."""
    progress: RunProgress
    report: RunReporter
    meter: IntervalMeter
    watch: StragglerWatch
    """Names a rank that is slow before the gradient sync, while it is (``logging.straggler_*``)."""
    """Each logging interval's throughput, FLOP/s, MFU, memory and data wait (``perf/*`` columns)."""

    def __init__(
        self,
        cfg: Config,
        *,
        resume: Optional[str] = None,
        callbacks: Sequence[Callback] = (),
        on_step: Optional[Callable[[int], None]] = None,
        create_data: bool = False,
    ) -> None:
        self.cfg = cfg
        self.resume = resume or cfg.checkpoint.resume
        self.hooks = RunCallbacks.for_run(callbacks, on_step, cfg.training.steps, cfg.checkpoint.memory_every)
        self.create_data = create_data
        self.stopped_early: Optional[tuple[int, int, str]] = None
        """(step, steps, why) of a run a callback stopped before ``training.steps`` (None: it did not)."""

    def train(self) -> dict[str, float]:
        """Set up, train to ``training.steps``, finish; the final metrics (identical on every rank)."""
        cfg, steps = self.cfg, self.cfg.training.steps
        self.plot = LossPlot.start() if nd.detect_cluster_env().rank == 0 else None  # imports matplotlib meanwhile
        # ---- set up: process group, locked run directory, data, model, optimizer; resume from a checkpoint
        with claimed_run_dir(cfg) as self.run_dir, CheckpointWriter(cfg.checkpoint.async_save) as self.writer:
            run = self.components = build_components(cfg, self.create_data)
            resumed = resume_from(run, self.resume, self.run_dir / "checkpoints", self.hooks.callbacks)
            if resumed is None and cfg.run.init_from:  # fine-tuning: another run's weights, all else anew
                weights_from(run, cfg.run.init_from)
            if resumed is not None and finished_at(run.step, steps, self.run_dir, self.resume):
                return finished_run_metrics(run, self.run_dir)  # else it stopped after its last save: finish it
            self._open_outputs(resumed)
            with (
                StopSignals() as stop,
                frozen_heap(),
                batch_builder(run) as prefetch,  # the prefetch thread, DataLoader workers or neither
                StepProfiler(cfg.profiling, nd.get_rank(), self.run_dir, run.device, run.step) as profiler,
            ):
                batches = global_batches(run.sampler)
                while run.step < steps:
                    # ---- batch: this rank's share of the next global batch (built while the last step ran)
                    started = time.perf_counter()
                    batch = next(batches)
                    inputs = prefetch.take(batch)
                    fetched = time.perf_counter()
                    if run.step + 1 < steps:
                        prefetch.start(next_batch(run.sampler))
                    # ---- forward/backward, then the optimizer step: the same update on every rank
                    with first_step_flops(self.meter, countable=run.placement.counts_flops):
                        loss_sum = forward_backward(run, batch, inputs)
                    optimizer_step(run, loss_sum)
                    run.step += 1
                    profiler.after_step(run.step)
                    done = time.perf_counter()
                    self.progress.count(batch, loss_sum, done - started)
                    self.meter.count_step(batch.global_size, fetched - started, done - fetched, run.forward_seconds)
                    self._record_sample_ids(batch)
                    # ---- save, then validate: a failure during a (possibly long) validation loses no step
                    if _due(run.step, cfg.checkpoint.every_steps) or run.step == steps:
                        self._save()
                    # ---- validate (and after the last step) and log
                    validation = {}
                    if _due(run.step, cfg.training.val_every) or run.step == steps:
                        validation = self._validate()
                    row = self._log(validation)
                    self.hooks.stepped(run.step, float(run.scheduler.get_last_lr()[0]), row, loss_sum)
                    # ---- stop: on a signal or a callback's request on any rank, at the same step on every rank
                    signum = stop.agreed(force=self._agree_on_stop_now(), asks=self.hooks.asks(self.writer))
                    if signum is not None:
                        self._stop(signum)
                    if self.hooks.agreed(stop.answers, self.writer) and run.step < steps:
                        self._stop_early()
                        break
            # ---- finish: the run's outputs (the last step is saved and validated by now)
            return self._finish()

    def _open_outputs(self, resumed: Optional[int]) -> None:
        """The run's config file, logs, progress bar and metrics (rank 0 writes the shared ones)."""
        cfg, rank, step = self.cfg, nd.get_rank(), self.components.step
        if rank == 0:
            save_config(cfg, self.run_dir / "config.yaml")
        trackers = open_trackers(cfg, self.run_dir, self.components, rank)  # MLflow, W&B, when asked
        logs = cfg.logging
        self.report = RunReporter(
            self.run_dir, rank, cfg.training.steps, step, logs.progress, logs.tensorboard, trackers, self.plot
        )
        resumed_note = f" (resumed from step {resumed})" if resumed else ""
        self.report.log.info("start: world %d, step %d%s", nd.get_world_size(), step, resumed_note)
        if cfg.logging.record_samples and rank == 0:
            forget_samples_after(self.run_dir, step)  # steps past the checkpoint are trained again now
        self.progress = RunProgress(resumed_from=resumed, last_saved=resumed)
        run = self.components
        peak = rank_peak(run.device, cfg.logging.peak_flops, self.report.log, write=rank == 0)  # cached: see the log
        self.meter = IntervalMeter(nd.get_world_size(), rank, run.device, peak.value, cfg.parallel.tp, peak.raise_to)
        hosts = nd.all_gather_object(socket.gethostname())
        self.watch = StragglerWatch(hosts, cfg.logging.straggler_threshold, cfg.logging.straggler_intervals)

    def _record_sample_ids(self, batch: nd.IndexBatch) -> None:
        """``logging.record_samples``: which sample ids each rank trained on at this step."""
        if self.cfg.logging.record_samples and self.components.placement.leader:  # tensor/pipeline peers: same ids
            append_samples(self.run_dir, nd.get_rank(), self.components.step, list(batch))

    def _validate(self) -> dict[str, float]:
        """The exact validation metrics now; a checkpoint of this step gets its metric (``best``)."""
        run = self.components
        metrics = evaluate(run)
        self.progress.validated = (run.step, dict(metrics))
        self._record_metric()
        self.hooks.validated(run.step, metrics)
        return metrics

    def _record_metric(self) -> None:
        """A checkpoint of the validated step gets its ``val/loss`` (``best``), once it is on disk."""
        step, (validated, metrics) = self.components.step, self.progress.validated or (None, {})
        if self.progress.last_saved == step == validated and "val/loss" in metrics:
            self._wait_saved()
            record_metric(self.run_dir / "checkpoints", step, metrics["val/loss"])

    def _log(self, validation: dict[str, float]) -> Optional[dict[str, float]]:
        """A metrics row when one is due (or validation ran, or this is the last step), which it
        returns; the progress bar."""
        run, progress, row = self.components, self.progress, None
        every, last = self.cfg.logging.every_steps, run.step == self.cfg.training.steps
        if run.step % every == 0 or validation or last:
            # One small all-reduce per log row: the exact mean loss over the interval, and every
            # rank's costs (interval_metrics.py).
            total = nd.all_reduce(self.meter.pack(progress.since_log), check=False)
            progress.loss = float(total[0] / total[1])
            progress.since_log.zero_()
            row = {
                "train/loss": progress.loss,
                "lr": float(run.scheduler.get_last_lr()[0]),
                "epoch": float(run.sampler.epoch),
                **validation,
                **self.meter.row(total, run.task.tokens_per_sample),
            }
            self.report.metrics(run.step, row)
            for line in self.watch.check(self.meter.forward_per_rank, run.step):
                self.report.log.warning(line)
                if nd.get_rank() == 0:
                    print(f"neural_arch: {line}", flush=True)
        self.report.progress(run.step, progress.loss, progress.samples / (time.perf_counter() - progress.started))
        return row

    def _save(self) -> None:
        """Commit this step's checkpoint (its metric follows once validated: ``_validate``)."""
        run, checkpoints = self.components, self.run_dir / "checkpoints"
        self._wait_saved()  # the save before (``save`` waits for it too): its on_save first
        state, keep_last = run.checkpoint_state(), self.cfg.checkpoint.keep_last
        self.writer.save(checkpoints, run.step, state, keep_last=keep_last, shards=run.shard_state())
        self.progress.last_saved = run.step
        self.hooks.saved(run.step, checkpoints / step_name(run.step), self.writer)

    def _wait_saved(self) -> None:
        """Wait until the save in flight is committed (collective), then call its ``on_save``."""
        self.writer.wait()
        self.hooks.committed()

    def _agree_on_stop_now(self) -> bool:
        """Whether this step was the last, or validated or saved (the same on every rank): ranks
        then agree on stop signals at once, so none is lost at the end or delayed by a slow step."""
        step, cfg = self.components.step, self.cfg
        return (
            step >= cfg.training.steps or _due(step, cfg.training.val_every) or _due(step, cfg.checkpoint.every_steps)
        )

    def _stop(self, signum: int) -> None:
        """Save at this step (every rank agreed on the signal) and leave with ``TrainingStopped``."""
        run = self.components
        if self.progress.last_saved != run.step:
            self._save()
        self._wait_saved()  # the job may be killed soon after we exit: this step must be on disk
        checkpoint = self.run_dir / "checkpoints" / step_name(run.step)
        self.report.log.info("stopped by signal %d at step %d; checkpoint %s", signum, run.step, checkpoint)
        self.report.end(finished=False)
        self.report.close()
        requeue_if_asked(self.cfg.checkpoint.requeue_on_stop, signum)
        raise TrainingStopped(signum, run.step, self.cfg.training.steps, str(checkpoint))

    def _stop_early(self) -> None:
        """A callback asked to stop (every rank agreed): save this step; ``_finish`` validates it."""
        run = self.components
        self.stopped_early = (run.step, self.cfg.training.steps, self.hooks.stop_reason())
        if self.progress.last_saved != run.step:
            self._save()
            self._record_metric()  # where this step validated before it was saved
        self.report.log.info("stopped early at step %d of %d: %s", *self.stopped_early)

    def _finish(self) -> dict[str, float]:
        """The final metrics (every rank), then the run's outputs (rank 0). A run resumed from
        its last step (stopped during the final validation or report) validates here."""
        run, progress = self.components, self.progress
        train_seconds = time.perf_counter() - progress.started
        already = progress.validated is not None and progress.validated[0] == run.step
        final = progress.validated[1] if already else self._validate()  # type: ignore[index]
        self._wait_saved()  # the last step is committed before the outputs
        per_rank = step_times_per_rank(progress.step_times)  # collective
        if final and not already:  # the last step's row holds them already
            self.report.metrics(run.step, final)
        self.report.close()
        self.report.draw_losses()  # rank 0: in a helper process, while the report and summary are written
        run.release_training_state()  # saved already; frees room for the report
        throughput = run_throughput(progress.samples, len(progress.step_times), train_seconds)
        if self.cfg.training.report:
            task_report(run, self.run_dir, final, throughput)
        if nd.get_rank() == 0:
            samples, note = progress.samples, self.watch.summary()
            write_outputs(self.run_dir, run.task, final, throughput, per_rank, samples, note, self.stopped_early)
            self.report.end(finished=True)  # loss.png drawn by now
        self.hooks.finished(run.step, final, self.stopped_early)
        return final


def _due(step: int, every: Optional[int]) -> bool:
    """Whether something done every ``every`` steps (0 or None: never) is due at ``step``."""
    return bool(every) and step % every == 0  # type: ignore[operator]
