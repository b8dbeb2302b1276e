"""The framework's config sections: ``run``, ``optim``, ``schedule``, ``training``, ``checkpoint``, ``logging``.

Used by config.py, which assembles them with the app's ``model``/``data``, the ``parallel`` layout
and the ``ddp`` section into ``Config`` and loads, checks and saves it. Each field is followed by
the string that documents it (the config reference is generated from these).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional


@dataclass
class RunConfig:
    name: str = "run"
    """Run name, used in logs and metric files."""
    dir: str = "runs/run"
    """Directory for checkpoints, metrics and the saved config."""
    seed: int = 0
    """Seed for weights and data order (same seed => same run at any world size)."""
    task: str = "regression"
    """The application: an installed task's name (a ``neural_arch.tasks`` entry point; the default is the small
    MLP, so an empty config trains in a second) or your own as ``package.module:TaskClass``."""
    init_from: Optional[str] = None
    """Fine-tuning: start from the model weights of another run's newest checkpoint (a run directory,
    its checkpoints/ or a step_* directory; any layout, full or sharded); optimizer, schedule and step
    start anew. Used only when there is nothing to resume (a run that saved resumes from its own)."""


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
    warm_spares: bool = False
    """When the run starts its own launcher: keep one spare worker per rank with torch imported,
    so that a restart skips the interpreter's start and torch's import (seconds per restart,
    about 300 MB of memory per spare; docs/launcher.md)."""
    precision: Literal["fp32", "fp64", "bf16", "fp16"] = "fp32"
    """Compute precision."""
    grad_clip: Optional[float] = None
    """Clip the global gradient norm to this value; null disables clipping."""
    val_every: int = 0
    """Validate every N steps; 0 = only at the end."""
    val_batches: Optional[int] = None
    """Validate on the first N global batches of the validation split only (the same samples on
    any number of ranks, so still comparable across layouts); null = the exact full split."""
    report: bool = True
    """At the end, the app's report (report.md, plots, generated samples); false skips
    it (summary and loss plot stay), e.g. for a large model whose samples take long on a CPU."""
    nan_policy: Literal["stop", "skip"] = "stop"
    """On a non-finite loss: stop with an error, or skip that step on every rank."""
    timeout: float = 600.0
    """Collective timeout in seconds, so a dead peer fails the run instead of hanging it."""
    prefetch: bool = True
    """Build the next step's batch in a background thread while this step computes (same ids,
    same tensors); set false for a task whose ``batch()`` draws from torch's global RNG."""
    data_workers: int = 0
    """Build the coming steps' batches in this many DataLoader worker processes instead of the
    prefetch thread (decoding-heavy ``batch()``: images, audio, tokenization); the same samples and
    the same tensors as 0, bitwise. Needs ``prefetch: true`` (the same purity of ``batch()``)."""
    compile: bool = False
    """``torch.compile`` the model's repeated blocks (or the whole model if it has none): a slow
    first step, then maybe faster ones (not the sea-ice U-Net on CPU); float32 rounding of eager."""


@dataclass
class CheckpointConfig:
    every_steps: int = 100
    """Save every N steps; 0 = only at the end (each save fsyncs and hashes the whole state)."""
    keep_last: int = 3
    """Checkpoints kept on disk (older ones are deleted after a successful save)."""
    resume: str = "auto"
    """``auto`` (newest in run.dir if any), ``none`` (start fresh) or a checkpoint path."""
    format: Literal["auto", "full", "sharded"] = "auto"
    """``sharded``: every rank writes its own shards with DCP (nothing is gathered, so a model too
    large for one process saves as fast as its ranks write); ``full``: rank 0 writes the whole
    single-process state, gathered from any layout (one file to hand over). ``auto``: sharded for
    a ``parallel:`` layout, full for plain data parallelism (every rank holds everything anyway).
    Both resume on any layout; export, generate and ``load_checkpoint`` read both."""
    async_save: bool = True
    """Write checkpoints in the background: the state is copied off the training tensors (as much
    memory again as the state), training continues, and the step is committed when complete; at
    most one save in flight. false: training waits while every byte is written."""
    memory_every: int = 0
    """Also keep a snapshot of the training state in the memory of this node's launcher every N
    steps (0 = off): a rank killed mid-run restarts the group from it, no file read, at most N
    steps recomputed, bitwise equal. Needs our launcher (``neural-arch train --nproc-per-node``,
    ``neural-arch launch``); not sharded state yet; lost with the node (disk checkpoints stay)."""
    requeue_on_stop: bool = False
    """Under SLURM: after a stop signal (e.g. ``--signal=USR1@120`` before the time limit) has been
    saved, rank 0 runs ``scontrol requeue $SLURM_JOB_ID`` so the job queues again and resumes."""


@dataclass
class LoggingConfig:
    every_steps: int = 10
    """Log metrics every N steps."""
    progress: bool = True
    """Show progress on rank 0: a bar on a terminal, else (a log, a pipe, the launcher) one plain line every 10 s."""
    tensorboard: bool = True
    """Write TensorBoard event files to run.dir."""
    record_samples: bool = False
    """Append each step's sample ids to logs/samples_rank_N.jsonl (for auditing resumes)."""
    peak_flops: Optional[float] = None
    """One rank's peak FLOP/s for the ``perf/mfu`` column (e.g. 989e12 for an H100's dense bf16);
    null: measured once at start-up with a float32 matmul on the rank's device."""
    mlflow: bool = False
    """Log to MLflow on rank 0 (params, every metrics row, the report and plots as artifacts); one MLflow
    run per training run, reopened after a stop, restart, requeue or resize (pip install 'neural_arch[mlflow]')."""
    mlflow_uri: Optional[str] = None
    """The MLflow tracking store; null: ``sqlite:///RUN_DIR/mlflow.db`` (a file, no server), its artifacts in
    RUN_DIR/mlartifacts."""
    wandb: bool = False
    """Log to Weights & Biases on rank 0 (the config, every metrics row, the report and plots as run files); one
    W&B run per training run, continued after a stop, restart, requeue or resize (pip install 'neural_arch[wandb]')."""
    wandb_project: Optional[str] = None
    """The W&B project; null: ``run.name``."""
    wandb_entity: Optional[str] = None
    """The W&B team or user the run belongs to; null: your default entity."""
    wandb_mode: Optional[Literal["online", "offline"]] = None
    """``online`` (sent as it runs) or ``offline`` (kept in RUN_DIR/wandb for ``wandb sync``); null: W&B's own
    choice (``WANDB_MODE``, ``wandb offline``, else online once ``wandb login`` is done)."""
    straggler_threshold: float = 0.2
    """Warn when a rank's time before the gradient sync stays this fraction above the median rank's."""
    straggler_intervals: int = 3
    """... for this many metrics rows in a row (one warning per episode, counted in the summary)."""
