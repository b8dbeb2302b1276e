"""The training loop behind ``neural-arch train``: exact on any number of ranks, resumable.

Run: ``neural-arch train --config configs/tiny.yaml --nproc-per-node 2`` or, in Python,
``train(load_config("configs/tiny.yaml"))`` under any launcher (or none).

Every optimizer step consumes one global batch of the world-size-invariant sampler; each
rank's share is split into ``grad_accum_steps`` micro-batches (all but the last under
``no_sync``) and weighted by the global batch size, so the update equals one process's
on the same batch. Checkpoints hold everything needed to continue mid-epoch with the same
result: weights, optimizer, scheduler, scaler, sampler position, step, every rank's RNG.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

import neural_arch.distributed as nd
from neural_arch.distributed.checkpoint import load_checkpoint, save_checkpoint
from neural_arch.training.builders import autocast_context, build_optimizer, build_scaler, build_scheduler
from neural_arch.training.config import Config, config_to_dict, save_config, validate_config
from neural_arch.training.reporting import RunReporter, format_summary, plot_losses
from neural_arch.training.state import capture_rng, restore_rng, seed_rank
from neural_arch.training.tasks import Task, build_task


class Parts:
    """Everything the loop updates, built once from the config by the ``build_*`` functions."""

    def __init__(self, cfg: Config, device: torch.device) -> None:
        self.cfg = cfg
        self.task: Task = build_task(cfg)
        self.task.prepare()
        self.model = nd.DistributedDataParallel(self.task.build_model().to(device))
        self.optimizer = build_optimizer(cfg, self.model)
        self.scheduler = build_scheduler(cfg, self.optimizer)
        self.scaler = build_scaler(cfg, device)
        self.sampler = nd.DistributedSampler(
            dataset_size=self.task.train_size, batch_size=cfg.training.global_batch_size, seed=cfg.run.seed
        )
        self.device = device
        self.step = 0

    def state(self) -> dict[str, Any]:
        """Checkpoint content (call on every rank: it gathers every rank's RNG state)."""
        return {
            "model": self.model.module.state_dict(), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
            "sampler": self.sampler.state_dict(), "step": self.step, "world_size": nd.get_world_size(),
            "rng": nd.all_gather_object(capture_rng()), "config": config_to_dict(self.cfg),
            "task": self.task.state_dict(),
        }

    def load(self, state: dict[str, Any], seed: int) -> None:
        self.model.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.sampler.load_state_dict(state["sampler"])
        self.step = int(state["step"])
        self.task.load_state_dict(state.get("task", {}))
        rank = nd.get_rank()
        if state["world_size"] == nd.get_world_size():
            restore_rng(state["rng"][rank])
        else:  # the old per-rank streams mean nothing at another world size
            seed_rank(seed, rank, self.step)


def train_step(p: Parts, cfg: Config, batch: nd.IndexBatch) -> torch.Tensor:
    """One optimizer step on one global batch; returns this rank's (loss sum, samples)."""
    p.optimizer.zero_grad(set_to_none=True)
    ids = torch.tensor(batch, dtype=torch.long)
    local = torch.zeros(2, dtype=torch.float64)
    micro = torch.tensor_split(ids, cfg.training.grad_accum_steps)
    for j, part in enumerate(micro):
        sync = contextlib.nullcontext() if j == len(micro) - 1 else p.model.no_sync()
        with sync, autocast_context(cfg, p.device):
            per = p.task.loss(p.model, p.task.batch("train", part, p.device))
            loss = nd.global_batch_loss(per, batch.global_size)
        p.scaler.scale(loss).backward()
        local[0] += per.detach().double().sum().cpu()
    local[1] = len(batch)
    p.scaler.unscale_(p.optimizer)
    # The gradients were averaged over ranks, so this norm (and the decision below) is the
    # same on every rank without another collective.
    grads = [q.grad for q in p.model.parameters() if q.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)  # one read of the gradients (clip_grad_norm_ with inf also rescales)
    if cfg.training.grad_clip is not None and torch.isfinite(norm):
        torch.nn.utils.clip_grads_with_norm_(p.model.parameters(), cfg.training.grad_clip, norm)
    if not torch.isfinite(norm) and not p.scaler.is_enabled():  # fp16's scaler skips such steps itself
        _non_finite(p, cfg, local)
        return local
    p.scaler.step(p.optimizer)
    p.scaler.update()
    p.scheduler.step()
    return local


def _non_finite(p: Parts, cfg: Config, local: torch.Tensor) -> None:
    """Stop (naming the step and ranks) or skip the step, identically on every rank."""
    sums = [float(s[0]) for s in nd.all_gather(local, check=False)]
    bad = [r for r, s in enumerate(sums) if not torch.isfinite(torch.tensor(s))]
    where = f"non-finite loss on rank(s) {bad}" if bad else "finite losses but non-finite gradients"
    if cfg.training.nan_policy == "stop":
        raise FloatingPointError(
            f"training diverged at step {p.step + 1} ({where}); lower optim.lr, set training.grad_clip, "
            "or set training.nan_policy=skip to skip such steps."
        )
    p.optimizer.zero_grad(set_to_none=True)
    p.scheduler.step()


@torch.no_grad()
def evaluate(p: Parts, cfg: Config) -> dict[str, float]:
    """Exact global validation metrics: the task's sums over every rank's share, no padding."""
    if p.task.val_size == 0:
        return {}
    sampler = nd.DistributedSampler(dataset_size=p.task.val_size, batch_size=cfg.training.global_batch_size, shuffle=False)
    p.model.eval()
    sums = None
    for batch in sampler:
        with autocast_context(cfg, p.device):
            part = p.task.eval_sums(p.model.module, p.task.batch("val", torch.tensor(batch, dtype=torch.long), p.device))
        sums = part if sums is None else sums + part
    p.model.train()
    return p.task.finalize(nd.all_reduce(sums, check=False))


def _resume(p: Parts, cfg: Config, resume: str, ckpt_dir: Path) -> Optional[int]:
    if resume == "none":
        return None
    found = load_checkpoint(ckpt_dir if resume == "auto" else Path(resume))
    if found is None:
        if resume != "auto":
            raise ValueError(f"--resume {resume}: no checkpoint there; use --resume auto or none.")
        return None
    info, state = found
    p.load(state, cfg.run.seed)
    return info.step


def train(cfg: Config, *, resume: Optional[str] = None, on_step: Optional[Callable[[int], None]] = None,
          create_data: bool = False) -> dict[str, float]:
    """Train to ``cfg.training.steps``; returns the final metrics (identical on every rank).

    ``create_data``: first create the icenet store at ``data.path`` if it does not exist
    (every rank writes its share of the months).
    """
    t = cfg.training
    nd.init_process_group(backend=None if t.backend == "auto" else t.backend, timeout=t.timeout)
    rank, world = nd.get_rank(), nd.get_world_size()
    validate_config(cfg, world_size=world)  # again: torchrun/srun may start a world the config did not name
    device = torch.device("cuda", torch.cuda.current_device()) if nd.get_backend() == "nccl" else torch.device("cpu")
    run_dir = Path(cfg.run.dir)
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    nd.barrier()
    if create_data and cfg.data.name == "icenet" and not Path(cfg.data.path).exists():  # type: ignore[arg-type]
        from neural_arch.training.task_icenet import create_data as create_icenet_data

        create_icenet_data(cfg)
    seed_rank(cfg.run.seed, rank)
    p = Parts(cfg, device)
    resumed = _resume(p, cfg, resume or cfg.checkpoint.resume, run_dir / "checkpoints")
    report = RunReporter(run_dir, rank, t.steps, p.step, cfg.logging.progress, cfg.logging.tensorboard)
    report.log.info("start: world %d, step %d%s", world, p.step, f" (resumed from step {resumed})" if resumed else "")
    started, samples, step_times, last_saved = time.perf_counter(), 0, [], resumed
    since_log = torch.zeros(2, dtype=torch.float64)  # (loss sum, samples) since the last log row
    loss = float("nan")
    while p.step < t.steps:
        for batch in p.sampler:
            tick = time.perf_counter()
            since_log += train_step(p, cfg, batch)
            p.step += 1
            step_times.append(time.perf_counter() - tick)
            samples += batch.global_size
            if cfg.logging.record_samples:
                with open(run_dir / "logs" / f"samples_rank_{rank}.jsonl", "a") as f:
                    f.write(f'{{"step": {p.step}, "ids": {list(batch)}}}\n')
            row: dict[str, float] = {}
            if t.val_every and p.step % t.val_every == 0:
                row.update(evaluate(p, cfg))
            if p.step % cfg.logging.every_steps == 0 or row or p.step == t.steps:
                # One small all-reduce per log row: the exact mean loss over the interval.
                total = nd.all_reduce(since_log, check=False)
                loss = float(total[0] / total[1])
                since_log.zero_()
                row = {"train/loss": loss, "lr": p.scheduler.get_last_lr()[0], "epoch": float(p.sampler.epoch), **row}
                report.metrics(p.step, row)
            report.progress(p.step, loss, samples / (time.perf_counter() - started))
            every = cfg.checkpoint.every_steps
            if every and p.step % every == 0 and p.step < t.steps:
                save_checkpoint(run_dir / "checkpoints", p.step, p.state(), keep_last=cfg.checkpoint.keep_last, metric=row.get("val/loss"))
                last_saved = p.step
            if on_step is not None:
                on_step(p.step)
            if p.step >= t.steps:
                break
        else:
            p.sampler.set_epoch(p.sampler.epoch + 1)
    train_seconds = time.perf_counter() - started
    final = evaluate(p, cfg)
    if last_saved != p.step:
        save_checkpoint(run_dir / "checkpoints", p.step, p.state(), keep_last=cfg.checkpoint.keep_last, metric=final.get("val/loss"))
    mean_max = torch.tensor([sum(step_times) / max(len(step_times), 1), max(step_times, default=0.0)], dtype=torch.float64)
    per_rank = [(float(a), float(b)) for a, b in nd.all_gather(mean_max)]
    if final:
        report.metrics(p.step, final)
    report.close()
    if rank == 0:
        if (run_dir / "metrics.jsonl").exists():
            plot_losses(run_dir / "metrics.jsonl", run_dir / "loss.png")
        throughput = {"processes": float(world), "samples_per_s": samples / max(train_seconds, 1e-9),
                      "train_seconds": train_seconds, "steps": float(len(step_times))}
        p.task.report(run_dir, p.model.module, final, throughput)
        summary = format_summary(final, train_seconds, samples, per_rank, world)
        (run_dir / "summary.txt").write_text(summary + "\n")
        (run_dir / "summary.json").write_text(json.dumps({**throughput, **final}, indent=2) + "\n")
        print(summary, flush=True)
    return final
