"""The GPT from a training checkpoint: text generation and TorchScript export.

Used by ``neural-arch generate --checkpoint runs/gpt --prompt "def "`` and
``neural-arch export --checkpoint runs/gpt/checkpoints --output gpt.ts`` through
``GPTTask.generate`` / ``GPTTask.build_export``; from Python,
``model = model_from_state(state)`` with ``state`` a loaded checkpoint.
"""

from __future__ import annotations

from typing import Any

import torch

from neural_arch.apps.gpt.model import GPT, VOCAB, generate
from neural_arch.export import ExportSpec
from neural_arch.training.task import GenerationSettings

EXPORT_ATOL = 1e-4
"""Largest accepted |TorchScript - eager| of the logits: the script fuses a few ops
differently, which moves float32 logits of size ~10 by a few ulps."""


def model_from_state(state: dict[str, Any]) -> GPT:
    """The GPT the checkpoint's ``config["model"]`` describes, with its weights, in eval mode."""
    sizes = state.get("config", {}).get("model")
    if not isinstance(sizes, dict) or "d_model" not in sizes:
        raise ValueError(
            "the checkpoint's config has no GPT model section (model.d_model ...); was it trained with run.task: gpt?"
        )
    model = GPT(
        d_model=int(sizes["d_model"]),
        n_layers=int(sizes["n_layers"]),
        n_heads=int(sizes["n_heads"]),
        mlp_ratio=int(sizes["mlp_ratio"]),
        dropout=float(sizes["dropout"]),
        positional=str(sizes["positional"]),
        context=int(sizes["context"]),
    )
    weights = state["model"]
    model.to(next(iter(weights.values())).dtype)  # float64 runs stay float64
    model.load_state_dict(weights)
    return model.eval()


def generate_text(state: dict[str, Any], prompt: bytes, settings: GenerationSettings) -> bytes:
    """``settings.length`` bytes after ``prompt`` from the checkpoint's model."""
    model = model_from_state(state)
    generator = torch.Generator().manual_seed(settings.seed)
    return generate(
        model,
        prompt,
        settings.length,
        settings.temperature,
        settings.top_k,
        generator=generator,
        use_cache=settings.use_cache,
    )


def export_spec(state: dict[str, Any]) -> ExportSpec:
    """The model's forward (bytes [n, T] int64 -> logits [n, T, 256]) and two example texts."""
    model = model_from_state(state)
    length = min(model.context, 48)
    example = torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(0))
    return ExportSpec(model, example, atol=EXPORT_ATOL)
