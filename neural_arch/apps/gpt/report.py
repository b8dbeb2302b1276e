"""The GPT run's report.md: bits per byte against the baselines, samples, speed, size.

Written by ``GPTTask.report`` on rank 0 at the end of ``neural-arch train --config
configs/gpt.yaml``; the loss curve (train and validation, in nats per byte) is the
trainer's ``loss.png`` next to it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

import neural_arch.distributed as nd
from neural_arch.apps.gpt.model import generate

PROMPTS = (b"def ", b"import os\n", b"class Parser:\n    ")
"""Fixed prompts for the samples (the default corpus is Python source)."""
SAMPLE_BYTES = 200
SAMPLE_SEED = 1234
TEMPERATURE = 0.8
BASELINES = {
    "unigram": "unigram byte model (add-one, fitted on train)",
    "bigram": "bigram byte model (add-one, fitted on train)",
    "gzip": "gzip -9 of the validation text",
    "lzma": "lzma (preset 9) of the validation text",
}


def _table(final: dict[str, float]) -> list[str]:
    rows = ["| predictor | bits per byte |", "|---|---:|", f"| **this model** | **{final['val/bpb']:.4f}** |"]
    for name, what in BASELINES.items():
        key = f"val/baseline/{name}_bpb"
        if key in final:
            rows.append(f"| {what} | {final[key]:.4f} |")
    return rows


def _samples(model: nn.Module) -> list[str]:
    """Text from each prompt (temperature 0.8, one fixed seed), as fenced blocks."""
    was_training = model.training
    model.eval()
    # FSDP gathers for the key/value-cache method too (the plan's forward_methods); tensor
    # parallelism splits heads in hooks that method does not pass through: whole forwards there.
    cache = not any(isinstance(p, DTensor) and "tp" in (p.device_mesh.mesh_dim_names or ()) for p in model.parameters())
    out = []
    for prompt in PROMPTS:
        gen = torch.Generator(device=next(model.parameters()).device).manual_seed(SAMPLE_SEED)
        new = generate(model, prompt, SAMPLE_BYTES, TEMPERATURE, generator=gen, use_cache=cache)
        text = (prompt + new).decode("utf-8", "replace")
        out += [f"Prompt {prompt.decode()!r}:", "", "~~~~", text.replace("~~~~", "~ ~ ~ ~"), "~~~~", ""]
    model.train(was_training)
    return out


def write_report(
    run_dir: Path, task: Any, model: nn.Module, final: dict[str, float], throughput: dict[str, float]
) -> Path:
    """Write report.md (rank 0) and return its path. Every rank that calls it generates the samples
    alike: with a sharded model each forward is a collective."""
    samples = _samples(model)
    path = run_dir / "report.md"
    if nd.get_rank() != 0:
        return path
    cfg, bpb = task.cfg, final["val/bpb"]
    bigram = final.get("val/baseline/bigram_bpb", math.inf)
    verdict = "below" if bpb < bigram else "NOT below"
    manifest = task.corpus.manifest
    seconds = throughput["train_seconds"]
    lines = [
        "# Byte-level GPT report",
        "",
        f"Validation bits per byte: **{bpb:.4f}**, {verdict} the bigram baseline ({bigram:.4f}); exact over all "
        f"{int(final['val/bytes']):,} predicted bytes of the validation split.",
        "",
        *_table(final),
        "",
        f"Model: {task.parameters:,} parameters ({cfg.model.n_layers} blocks, d_model {cfg.model.d_model}, "
        f"{cfg.model.n_heads} heads, context {cfg.model.context}, {cfg.model.positional} positions).",
        "",
        f"Corpus: {len(manifest['files']):,} files, {manifest['train_bytes']:,} training and "
        f"{manifest['val_bytes']:,} validation bytes (source: {manifest['source'] or 'the standard library'}).",
        "",
        f"Speed: {throughput['samples_per_s'] * cfg.model.context:,.0f} tokens (bytes)/s over "
        f"{int(throughput['steps'])} steps on {int(throughput['processes'])} process(es); wall time of training "
        f"{seconds:.0f} s.",
        "",
        "![loss (nats per byte; train and validation)](loss.png)",
        "",
        f"## Samples ({SAMPLE_BYTES} bytes each, temperature {TEMPERATURE}, seed {SAMPLE_SEED})",
        "",
        *samples,
    ]
    path.write_text("\n".join(lines))
    print(f"report: {path} (validation {bpb:.4f} bits/byte; bigram baseline {bigram:.4f})", flush=True)
    return path
