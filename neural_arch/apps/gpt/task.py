"""The byte-level GPT task: next-byte prediction on a text corpus, scored in bits per byte.

Run: ``neural-arch train --config gpt --create-data`` (``run.task: gpt``).

- A training sample is a window of ``context + 1`` bytes of the training split whose start
  is a hash of (run.seed, sample index): the sampler's world-size-invariant order, exact
  weighting and exact resume apply unchanged. An epoch has ``data.samples_per_epoch``.
- Loss: mean cross-entropy over a window's ``context`` predicted bytes, one per sample.
- Validation: the whole validation split in non-overlapping windows (each byte after the
  first is predicted exactly once, the last window shorter and masked, never padded with
  duplicates); ranks add float64 (nats, bytes) sums, so bits per byte is exact.
- Baselines on the same bytes (unigram, bigram, gzip -9, lzma) are computed once by rank 0
  in ``prepare`` and reported as ``val/baseline/<name>_bpb``; ``report.md`` compares them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import neural_arch.distributed as nd
from neural_arch.apps.gpt.baselines import byte_baselines
from neural_arch.apps.gpt.config import SECTIONS, source_list
from neural_arch.apps.gpt.corpus import Corpus, check_corpus_inputs, create_corpus, stale_reason
from neural_arch.apps.gpt.inference import export_spec, generate_text
from neural_arch.apps.gpt.model import GPT, count_parameters
from neural_arch.export import ExportSpec
from neural_arch.training.builders import PARAM_DTYPES
from neural_arch.training.task import GenerationSettings, Task
from neural_arch.training.typed_config import ConfigError

if TYPE_CHECKING:  # a hint only: the plan module loads FSDP and DTensor
    from neural_arch.distributed.parallel import ParallelPlan

IGNORE = -100
"""Target value of the positions past the end of the last validation window (masked out)."""


def window_starts(seed: int, ids: np.ndarray, choices: int) -> np.ndarray:
    """Start of training window ``id``: SplitMix64 of (seed, id) modulo ``choices``; the
    same on every rank and run, independent of which rank asks or in which batch."""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        x = _splitmix64(np.full(len(ids), seed, dtype=np.uint64)) ^ ids.astype(np.uint64)
        return (_splitmix64(x) % np.uint64(choices)).astype(np.int64)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class GPTTask(Task):
    """Byte-level language modelling with a decoder-only transformer."""

    SECTIONS = SECTIONS
    REPORT_ON_EVERY_RANK = True  # report.py runs the model on every rank: a sharded model is never gathered

    @classmethod
    def data_missing(cls, cfg: Any) -> Optional[str]:
        path = Path(cfg.data.path)
        if not (path / "manifest.json").exists():
            return (
                f"data.path={cfg.data.path!r}: no corpus there; create it with `neural-arch create-data "
                "--config FILE` or add --create-data to the train command"
            )
        stale = stale_reason(path, source_list(cfg.data), cfg.data.val_fraction)
        if stale:
            raise ConfigError(stale)  # never silently train on another corpus
        return None

    @classmethod
    def check_data_inputs(cls, cfg: Any) -> None:
        check_corpus_inputs(Path(cfg.data.path), source_list(cfg.data), cfg.data.val_fraction, cfg.model.context)

    @classmethod
    def create_data(cls, cfg: Any) -> Path:
        return create_corpus(Path(cfg.data.path), source_list(cfg.data), cfg.data.val_fraction, cfg.model.context)

    @classmethod
    def build_export(cls, state: dict[str, Any]) -> ExportSpec:
        return export_spec(state)

    @classmethod
    def parallel_plan(cls) -> ParallelPlan:
        from neural_arch.apps.gpt.parallelize import parallel_plan  # loads DTensor: only for sharded layouts

        return parallel_plan()

    @classmethod
    def parallel_sizes(cls, cfg: Any) -> tuple[int, Optional[int]]:
        return cfg.model.n_layers, cfg.model.n_heads

    @classmethod
    def generate(cls, state: dict[str, Any], prompt: bytes, settings: GenerationSettings) -> bytes:
        return generate_text(state, prompt, settings)

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        missing = self.data_missing(cfg)
        if missing:
            raise ConfigError(missing)
        self.corpus = Corpus(Path(cfg.data.path))
        self.context = context = cfg.model.context
        self.tokens_per_sample = context  # predicted bytes per window
        smallest = min(len(self.corpus.train), len(self.corpus.val))
        if smallest < context + 1:
            raise ConfigError(
                f"model.context={context} needs {context + 1} bytes per window but the corpus at "
                f"data.path={cfg.data.path!r} has a split of {smallest}: lower model.context"
            )
        self.train_size = cfg.data.samples_per_epoch
        self.val_size = math.ceil((len(self.corpus.val) - 1) / context)
        self.baselines: dict[str, float] = {}
        self.parameters = 0

    def prepare(self) -> None:
        if "baselines" in self.corpus.manifest:  # corpora made since they are computed at creation
            self.baselines = dict(self.corpus.manifest["baselines"])
            return
        # An older corpus: rank 0 computes (lzma on the validation text takes a second or two), everyone gets it.
        mine = byte_baselines(self.corpus.train, self.corpus.val) if nd.get_rank() == 0 else None
        self.baselines = nd.all_gather_object(mine)[0]  # type: ignore[assignment]

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.cfg.run.seed)  # the same initial weights on every rank
        m = self.cfg.model
        model = GPT(
            d_model=m.d_model,
            n_layers=m.n_layers,
            n_heads=m.n_heads,
            mlp_ratio=m.mlp_ratio,
            dropout=m.dropout,
            positional=m.positional,
            context=m.context,
        )
        self.parameters = count_parameters(model)
        if nd.get_rank() == 0:
            print(
                f"gpt: {self.parameters:,} parameters ({m.n_layers} blocks, d_model {m.d_model}, "
                f"context {m.context}, {m.positional} positions)",
                flush=True,
            )
        return model.to(PARAM_DTYPES[self.cfg.training.precision])

    def batch(self, split: str, ids: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        offsets = np.arange(self.context + 1)
        if split == "train":
            starts = window_starts(self.cfg.run.seed, ids.numpy(), len(self.corpus.train) - self.context)
            window = torch.from_numpy(self.corpus.train[starts[:, None] + offsets].astype(np.int64))
            return {"x": window[:, :-1].to(device), "y": window[:, 1:].to(device)}
        val = self.corpus.val
        where = ids.numpy()[:, None] * self.context + offsets  # windows overlap by one byte: each byte predicted once
        window = torch.from_numpy(val[np.minimum(where, len(val) - 1)].astype(np.int64))
        y = torch.where(torch.from_numpy(where[:, 1:] < len(val)), window[:, 1:], IGNORE)
        return {"x": window[:, :-1].to(device), "y": y.to(device)}

    def _nats(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Cross-entropy in nats per position [n, context] (0 at masked positions)."""
        return self._nats_of(model(batch["x"]), batch["y"])

    @staticmethod
    def _nats_of(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # the softmax of half-precision logits loses bits per byte
        nats = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE, reduction="none"
        )
        return nats.view(y.shape)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.sample_loss(model(batch["x"]), batch["y"])

    def split_batch(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return batch["x"], batch["y"]

    def sample_loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self._nats_of(output, targets).mean(dim=1)

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        nats = self._nats(model, batch).double().sum()
        count = (batch["y"] != IGNORE).sum().double()
        return torch.stack([nats, count]).cpu()

    def finalize(self, sums: torch.Tensor) -> dict[str, float]:
        nats_per_byte = float(sums[0] / sums[1])
        out = {"val/loss": nats_per_byte, "val/bpb": nats_per_byte / math.log(2), "val/bytes": float(sums[1])}
        out.update({f"val/baseline/{name}_bpb": value for name, value in self.baselines.items()})
        return out

    def summary_metrics(self, final: dict[str, float]) -> dict[str, float]:
        # The baselines are in metrics.jsonl and summary.json; the summary shows the model's numbers.
        return {k: v for k, v in final.items() if not k.startswith("val/baseline/")}

    def report(self, run_dir: Path, model: nn.Module, final: dict[str, float], throughput: dict[str, float]) -> None:
        from neural_arch.apps.gpt.report import write_report

        write_report(run_dir, self, model, final, throughput)
