"""What the training loop needs to know about a problem: its config, data, model, loss, metrics.

Write an application by subclassing ``Task`` (each folder of ``neural_arch/apps/`` holds a
complete one) and name it in the config's ``run.task``: a registered name
(``register_task("mine", MyTask)``), an installed package's ``neural_arch.tasks`` entry
point, or ``package.module:MyTask``. The framework never names an application.

Contract that keeps training exact on any number of ranks: ``loss`` returns one loss per
sample (the loop weights them by the global batch size), ``eval_sums`` returns float64
*sums* over the given samples (the loop adds them over ranks with one all_reduce and calls
``finalize`` on the totals), and nothing a sample produces depends on the other samples
in its batch.

Class-level hooks (called before any rank trains, so they must not need a model):
``SECTIONS``, an ``AppSections`` record of the app's ``model:`` and ``data:`` config
dataclasses and their value rules; ``data_missing``, ``check_data_inputs`` and
``create_data`` (data that must exist before training); ``build_export`` (a checkpoint -> a TorchScript-ready model for
``neural-arch export``); ``generate`` (a checkpoint + prompt -> text, ``neural-arch generate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional

import torch
from torch import nn

from neural_arch.export import ExportSpec
from neural_arch.training.typed_config import ConfigError

if TYPE_CHECKING:  # a hint only: importing it loads FSDP and DTensor, which is slow
    from neural_arch.distributed.parallel.plan import ParallelPlan

RangeRule = tuple[Callable[[Any], bool], str]
"""(predicate on a value, what is allowed, said in the error message)."""


def _no_checks(cfg: Any) -> None:
    """The default cross-field check: none."""


@dataclass(frozen=True)
class AppSections:
    """An application's own config sections, defined next to them in ``apps/NAME/config.py``."""

    model: type
    """Dataclass of the ``model:`` section (fields with defaults and docstrings)."""
    data: type
    """Dataclass of the ``data:`` section."""
    ranges: dict[str, RangeRule] = field(default_factory=dict)
    """Value rules of both sections: ``{"model.depth": (lambda v: v >= 1, ">= 1")}``."""
    validate: Callable[[Any], None] = _no_checks
    """Cross-field checks on the whole config; raise ``ConfigError`` with one line."""


@dataclass(frozen=True)
class GenerationSettings:
    """How ``neural-arch generate`` samples from a model (``Task.generate``)."""

    length: int = 200
    """Bytes (tokens) to generate after the prompt."""
    temperature: float = 0.8
    """Softmax temperature; 0 means greedy (always the most likely next token)."""
    top_k: Optional[int] = None
    """Sample only among the k most likely tokens (None: all)."""
    seed: int = 0
    """Seed of the sampling generator: the same seed gives the same text."""
    use_cache: bool = True
    """Reuse the keys/values of earlier positions (KV cache) instead of recomputing them."""


class Task:
    """Base class of every application; override the methods that raise NotImplementedError."""

    SECTIONS: ClassVar[AppSections] = AppSections(model=type(None), data=type(None))
    """The app's ``model:``/``data:`` config sections and their rules."""

    train_size: int
    val_size: int
    tokens_per_sample: Optional[int] = None
    """What one training sample holds in tokens (a language model's context), for ``perf/tokens_per_s``;
    None: the app has no tokens."""

    # ---- class-level hooks: data creation, export
    @classmethod
    def data_missing(cls, cfg: Any) -> Optional[str]:
        """Why training cannot start yet (data not created), or None when it can."""
        return None

    @classmethod
    def check_data_inputs(cls, cfg: Any) -> None:
        """Refuse (``ConfigError``, one line) what ``create_data`` would refuse, in one process
        and without writing: run before a launcher starts ranks that would create the data."""

    @classmethod
    def create_data(cls, cfg: Any) -> Path:
        """Create the dataset the config names; called on every rank (collective) by
        ``neural-arch create-data`` and by ``train --create-data``; returns where it is."""
        raise ConfigError(f"run.task={cfg.run.task!r} has no data to create: its data is made when training starts")

    @classmethod
    def build_export(cls, state: dict[str, Any]) -> ExportSpec:
        """What ``neural-arch export`` scripts from the training checkpoint ``state``: the
        module (weights loaded) and an example input for the parity check."""
        raise ValueError(f"task {cls.__name__} does not support TorchScript export")

    @classmethod
    def parallel_plan(cls) -> Optional[ParallelPlan]:
        """How the model splits over ranks (blocks, tensor-parallel styles, pipeline stages) for a
        ``parallel:`` layout; None: only data parallelism (DDP, or FSDP of the whole model)."""
        return None

    @classmethod
    def parallel_sizes(cls, cfg: Any) -> tuple[int, Optional[int]]:
        """(blocks, attention heads) of the model the config describes, so that a layout that
        cannot split it is refused before any rank starts; with ``parallel_plan``."""
        raise NotImplementedError

    @classmethod
    def generate(cls, state: dict[str, Any], prompt: bytes, settings: GenerationSettings) -> bytes:
        """Text the checkpoint ``state``'s model continues ``prompt`` with (``neural-arch generate``)."""
        raise ValueError(
            f"task {cls.__name__} does not generate text; `neural-arch generate` needs a checkpoint "
            "of a language model (a task that implements Task.generate)"
        )

    # ---- per-run hooks: one instance per rank, built from the validated config
    def prepare(self) -> None:
        """Collective set-up on every rank after the process group exists (e.g. normalization)."""

    def build_model(self) -> nn.Module:
        """The plain model (no distributed code), same initial weights on every rank."""
        raise NotImplementedError

    def batch(self, split: str, ids: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        """Samples ``ids`` of ``split`` ("train"/"val"), ready for the model, on ``device``."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-sample training loss, shape [n]."""
        raise NotImplementedError

    def split_batch(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
        """(the model's input, the targets: a tensor or a dict/list of tensors, one row per sample);
        with ``sample_loss``, what a pipeline layout (``parallel.pp > 1``) needs: there the
        model runs on several ranks and only the last one sees the output."""
        raise NotImplementedError

    def sample_loss(self, output: torch.Tensor, targets: Any) -> torch.Tensor:
        """Per-sample training loss [n] from the model's output and ``split_batch``'s targets
        (``loss(model, batch)`` must equal ``sample_loss(model(inputs), targets)``)."""
        raise NotImplementedError

    @classmethod
    def splits_loss(cls) -> bool:
        """Whether the task implements ``split_batch`` and ``sample_loss`` (pipelines need both)."""
        return cls.split_batch is not Task.split_batch and cls.sample_loss is not Task.sample_loss

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """float64 vector of sums over the batch's samples (added over ranks by the loop)."""
        raise NotImplementedError

    def finalize(self, sums: torch.Tensor) -> dict[str, float]:
        """Validation metrics from the global sums."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Task state to keep in checkpoints (e.g. normalization statistics)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()`` from a checkpoint."""

    def summary_metrics(self, final: dict[str, float]) -> dict[str, float]:
        """The final metrics worth a line in the end-of-run summary (default: all)."""
        return final

    REPORT_ON_EVERY_RANK: ClassVar[bool] = False
    """True: ``report`` runs on every rank with the trained model as placed (sharded layouts: each
    forward is a collective, so every rank must make the same calls; write files on rank 0 only),
    and the whole model is never gathered. False: rank 0 alone gets the whole model, gathered."""

    def report(self, run_dir: Path, model: nn.Module, final: dict[str, float], throughput: dict[str, float]) -> None:
        """After training: write task-specific outputs (plots, report.md). Rank 0 only, with the
        whole model; or every rank with the placed model where ``REPORT_ON_EVERY_RANK``."""
