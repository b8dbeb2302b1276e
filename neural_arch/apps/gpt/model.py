"""A decoder-only byte-level transformer: ``GPT(d_model=128, n_layers=4, n_heads=4, context=128)``.

Try it::

    >>> import torch
    >>> from neural_arch.apps.gpt.model import GPT
    >>> GPT()(torch.zeros(2, 16, dtype=torch.long)).shape
    torch.Size([2, 16, 256])

Plain PyTorch with no distributed code (parallelism is applied from outside). Bytes are the
tokens (vocabulary 256). Pre-norm blocks (LayerNorm -> causal attention via
``scaled_dot_product_attention`` -> LayerNorm -> MLP) sit in one ``ModuleList`` of identical
blocks, so they can be sharded, split into pipeline stages or checkpointed per block. The
output head shares the embedding's weight.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256
"""Byte-level: every byte value is a token."""
KV = tuple[torch.Tensor, torch.Tensor]
"""One block's cached keys and values, each [B, heads, bytes so far, head size]."""


def rotary_tables(context: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape [context, head_dim / 2] for rotary position embedding (RoPE)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(context, dtype=torch.float64), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (even, odd) of ``x`` [B, H, T, D] by the angles of its T positions ([T, D/2] tables)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions <= t only."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, rotary: bool, context: int) -> None:
        super().__init__()
        self.head_dim, self.dropout = d_model // n_heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.resid_drop = nn.Dropout(dropout)
        self.rotary = rotary
        if rotary:
            cos, sin = rotary_tables(context, d_model // n_heads)
            # Not persistent: derived from the sizes, so checkpoints hold only learned weights.
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        else:  # empty, so that TorchScript sees the same attributes either way
            self.register_buffer("cos", torch.zeros(0), persistent=False)
            self.register_buffer("sin", torch.zeros(0), persistent=False)

    def _qkv(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys, values [B, H, T, D] of ``x``, whose first byte is at position ``start``."""
        b, t = x.shape[0], x.shape[1]
        qkv = self.qkv(x)
        # Heads counted from the projection's output width, so a tensor-parallel shard of the
        # projection holding some of the heads runs this same code (not view(..., -1, ...):
        # that is ambiguous for an empty batch, which a rank's last share can be).
        heads = qkv.shape[-1] // (3 * self.head_dim)
        q, k, v = qkv.view(b, t, 3, heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if self.rotary:
            cos, sin = self.cos[start : start + t], self.sin[start : start + t]
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return q, k, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x, 0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.resid_drop(self.proj(y.transpose(1, 2).flatten(2)))

    def cached(self, x: torch.Tensor, past: Optional[KV]) -> tuple[torch.Tensor, KV]:
        """Inference with a KV cache: the whole prompt (``past`` None) or one new byte."""
        q, k, v = self._qkv(x, 0 if past is None else past[0].shape[2])
        if past is not None:
            assert x.shape[1] == 1, "after the prompt the cache takes one byte at a time"
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        # One new query may see every cached key; the prompt needs the causal mask.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        return self.proj(y.transpose(1, 2).flatten(2)), (k, v)


class Block(nn.Module):
    """One pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int, dropout: float, rotary: bool, context: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout, rotary, context)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model),
            nn.GELU(),
            nn.Linear(mlp_ratio * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def cached(self, x: torch.Tensor, past: Optional[KV]) -> tuple[torch.Tensor, KV]:
        h, kv = self.attn.cached(self.ln1(x), past)
        x = x + h
        return x + self.mlp(self.ln2(x)), kv


class GPT(nn.Module):
    """Bytes [B, T] (T <= context) -> next-byte logits [B, T, 256]."""

    def __init__(
        self,
        d_model: int = 128,
        n_layers: int = 4,
        n_heads: int = 4,
        mlp_ratio: int = 4,
        dropout: float = 0.0,
        positional: str = "rotary",
        context: int = 128,
    ) -> None:
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(context, d_model) if positional == "learned" else None
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, mlp_ratio, dropout, positional == "rotary", context) for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # weight tying: one matrix reads and writes bytes
        self.apply(_init_weights)
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.2.weight")):
                # GPT-2's scaled init: keeps the residual stream's variance flat with depth.
                nn.init.normal_(p, mean=0.0, std=0.02 / (2 * n_layers) ** 0.5)

    def _embed(self, idx: torch.Tensor, start: int) -> torch.Tensor:
        end = start + idx.shape[1]
        if end > self.context:
            raise ValueError(
                f"GPT got {end} bytes at once but its context is {self.context}; pass at most {self.context}"
            )
        x = self.embed(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(start, end, device=idx.device))
        return self.drop(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self._embed(idx, 0)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def cached(self, idx: torch.Tensor, past: Optional[list[KV]]) -> tuple[torch.Tensor, list[KV]]:
        """(logits of ``idx``, the cache extended by it): the prompt first, then one byte per call."""
        x = self._embed(idx, 0 if past is None else past[0][0].shape[2])
        cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block.cached(x, None if past is None else past[i])
            cache.append(kv)
        return self.head(self.ln_f(x)), cache


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def count_parameters(model: nn.Module) -> int:
    """Learned numbers in the model; the tied embedding/head matrix counts once."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def generate(
    model: GPT,
    prompt: bytes,
    length: int,
    temperature: float = 0.8,
    top_k: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    use_cache: bool = True,
) -> bytes:
    """``length`` bytes after ``prompt`` (temperature 0: greedy). With ``use_cache`` each new
    byte costs one position while the text fits the context; past it, the window slides and
    every step recomputes the last ``context`` bytes, as without the cache (so both agree)."""
    device = next(model.parameters()).device
    idx = torch.tensor([list(prompt or b"\n")], dtype=torch.long, device=device)
    past: Optional[list[KV]] = None
    for _ in range(length):
        if not use_cache or idx.shape[1] > model.context:
            logits = model(idx[:, -model.context :])[0, -1].double()
        else:
            out, past = model.cached(idx if past is None else idx[:, -1:], past)
            logits = out[0, -1].double()
        if temperature <= 0:
            nxt = logits.argmax().view(1)
        else:
            if top_k is not None:
                logits[logits < torch.topk(logits, min(top_k, VOCAB)).values[-1]] = -float("inf")
            nxt = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator)
        idx = torch.cat([idx, nxt.view(1, 1)], dim=1)
    return bytes(idx[0, len(prompt or b"\n") :].tolist())
