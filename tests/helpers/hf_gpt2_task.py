"""A Hugging Face ``GPT2LMHeadModel`` as a custom app, built from a config (no hub access).

Use: ``neural-arch train --set run.task=tests.helpers.hf_gpt2_task:HFGPT2Task data.text=FILE``
(from the repository root, ``PYTHONPATH`` holding it). A model the framework did not write:
its blocks (``transformer.h``) and its tied embedding/head are found without a plan. The data
is the bytes of ``data.text`` cut into windows of ``model.context + 1`` bytes: the first
``data.samples`` train, the next ``data.val_samples`` validate. float64 by default, so runs on
different layouts differ only in summation order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from neural_arch.training.task import AppSections, Task
from neural_arch.training.typed_config import ConfigError, at_least


@dataclass
class HFModelConfig:
    layers: int = 2
    """GPT-2 blocks (``n_layer``)."""
    width: int = 64
    """Embedding width (``n_embd``)."""
    heads: int = 2
    """Attention heads (``n_head``)."""
    context: int = 16
    """Bytes per training window (``n_positions``)."""
    dropout: float = 0.1
    """GPT-2's resid, embedding and attention dropout (Hugging Face's default 0.1 for all three)."""


@dataclass
class HFDataConfig:
    text: str = ""
    """The text file whose bytes are the data (required)."""
    samples: int = 27
    """Training windows."""
    val_samples: int = 9
    """Validation windows, after the training ones."""


def _check(cfg: Any) -> None:
    if not cfg.data.text:
        raise ConfigError("data.text is empty; set it to a text file whose bytes are the data")


class HFGPT2Task(Task):
    """Next-byte prediction with a randomly initialised GPT-2; metric: validation loss per byte."""

    SECTIONS = AppSections(
        model=HFModelConfig,
        data=HFDataConfig,
        ranges={"data.samples": at_least(1), "data.val_samples": at_least(1), "model.context": at_least(2)},
        validate=_check,
    )

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        window = cfg.model.context + 1
        raw = open(cfg.data.text, "rb").read()
        n = cfg.data.samples + cfg.data.val_samples
        if len(raw) < n * window:
            raise ConfigError(f"data.text has {len(raw)} bytes; {n} windows of {window} need {n * window}")
        rows = torch.frombuffer(bytearray(raw[: n * window]), dtype=torch.uint8).long().view(n, window)
        self.rows = {"train": rows[: cfg.data.samples], "val": rows[cfg.data.samples :]}
        self.train_size, self.val_size = cfg.data.samples, cfg.data.val_samples
        self.tokens_per_sample = cfg.model.context

    def build_model(self) -> nn.Module:
        from transformers import GPT2Config, GPT2LMHeadModel  # a test dependency: imported by this app only

        m = self.cfg.model
        config = GPT2Config(
            n_layer=m.layers,
            n_embd=m.width,
            n_head=m.heads,
            n_positions=m.context,
            vocab_size=256,
            bos_token_id=0,
            eos_token_id=0,
            resid_pdrop=m.dropout,
            embd_pdrop=m.dropout,
            attn_pdrop=m.dropout,
        )
        torch.manual_seed(self.cfg.run.seed)
        return GPT2LMHeadModel(config).double()

    def batch(self, split: str, ids: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        rows = self.rows[split][ids].to(device)
        return {"x": rows[:, :-1], "y": rows[:, 1:]}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        # Per sample from the logits: HF's outputs.loss is one mean over the micro-batch.
        logits = model(input_ids=batch["x"], use_cache=False).logits
        return F.cross_entropy(logits.transpose(1, 2), batch["y"], reduction="none").mean(1)

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        per_sample = self.loss(model, batch).double()
        return torch.stack([per_sample.sum(), torch.tensor(float(len(per_sample)), dtype=torch.float64)])

    def finalize(self, sums: torch.Tensor) -> dict[str, float]:
        return {"val/loss": float(sums[0] / sums[1])}
