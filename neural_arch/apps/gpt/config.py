"""The GPT app's config sections: ``model:`` (the transformer) and ``data:`` (the byte corpus).

Used through ``run.task: gpt`` (configs/gpt.yaml), e.g.
``neural-arch train --config gpt --set model.d_model=64 model.positional=learned``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from neural_arch.training.task import AppSections, RangeRule
from neural_arch.training.typed_config import ConfigError, at_least


@dataclass
class GPTModelConfig:
    d_model: int = 128
    """Width of the residual stream (embedding size); a multiple of ``n_heads``."""
    n_layers: int = 4
    """Number of identical transformer blocks."""
    n_heads: int = 4
    """Attention heads per block (head size = d_model / n_heads, even for rotary)."""
    mlp_ratio: int = 4
    """Hidden width of each block's MLP as a multiple of ``d_model``."""
    dropout: float = 0.0
    """Dropout probability on attention weights and residual branches (0 = off)."""
    positional: Literal["learned", "rotary"] = "rotary"
    """Position encoding: a learned table added to the input, or rotary (RoPE) in attention."""
    context: int = 128
    """Bytes the model sees at once; a training sample is ``context + 1`` bytes."""


@dataclass
class GPTDataConfig:
    source: Union[str, list[str], None] = None
    """Text to train on: a directory, a glob or a file, or a list of them (``docs/``,
    ``["src/**/*.md", notes.txt]``); null means this interpreter's standard-library ``.py``
    sources (files that are not UTF-8 skipped)."""
    path: str = "data/gpt_corpus"
    """Directory the corpus is written to (train.bin, val.bin, manifest.json)."""
    val_fraction: float = 0.05
    """Share of the files (chosen by a hash of each relative path) held out for validation."""
    samples_per_epoch: int = 65536
    """Training windows per epoch; window i starts at a position drawn from (run.seed, i)."""


RANGES: dict[str, RangeRule] = {
    "model.d_model": at_least(1),
    "model.n_layers": at_least(1),
    "model.n_heads": at_least(1),
    "model.mlp_ratio": at_least(1),
    "model.dropout": ((lambda v: 0 <= v < 1), "in [0, 1)"),
    "model.context": at_least(1),
    "data.val_fraction": ((lambda v: 0 < v < 1), "in (0, 1)"),
    "data.samples_per_epoch": at_least(1),
}


def source_list(data: GPTDataConfig) -> Optional[list[str]]:
    """``data.source`` as a list (one entry written without brackets is a list of one), or None."""
    return [data.source] if isinstance(data.source, str) else data.source


def validate_sections(cfg: Any) -> None:
    """Cross-field checks: head size, rotary's even head size, a usable source list."""
    model, data = cfg.model, cfg.data
    if model.d_model % model.n_heads:
        raise ConfigError(
            f"model.d_model={model.d_model} is not divisible by model.n_heads={model.n_heads}: "
            "choose d_model as a multiple of n_heads"
        )
    if model.positional == "rotary" and (model.d_model // model.n_heads) % 2:
        raise ConfigError(
            f"model.positional='rotary' needs an even head size, got d_model/n_heads="
            f"{model.d_model // model.n_heads}: change model.d_model or model.n_heads"
        )
    if data.source is not None and any(not s.strip() for s in source_list(data)):
        raise ConfigError(
            f"data.source={data.source!r} holds an empty entry: remove it, or set data.source=null "
            "for the standard library's sources"
        )
    if not data.path.strip():
        raise ConfigError("data.path='' is empty: set it to the corpus directory, e.g. data/gpt_corpus")


SECTIONS = AppSections(model=GPTModelConfig, data=GPTDataConfig, ranges=RANGES, validate=validate_sections)
"""What ``run.task: gpt`` adds to the config."""
