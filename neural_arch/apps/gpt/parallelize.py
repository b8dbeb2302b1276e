"""How the GPT model splits over ranks: its tensor-parallel plan and pipeline stages.

Use: ``plan = parallel_plan()``, then ``parallelize_model(model, layout, mesh, plan)`` or
``build_pipeline(model, layout, mesh, plan, ...)`` from ``neural_arch.distributed.parallel``.
The model file stays free of distributed code; this file knows its module names.

Tensor parallelism (Megatron's pairing, heads split across ranks):
- ``attn.qkv`` is one fused Linear whose output is [q; k; v], each d_model wide with the
  heads side by side. ``FusedColwiseParallel(3)`` gives rank r the same heads of q, k and
  v (a plain column split would hand rank 0 all of q and half of k). The attention code
  counts heads from the projection's width, so it runs unchanged on r's heads.
- ``attn.proj`` row-wise: its input columns are exactly r's heads; one all-reduce.
- MLP: first Linear column-wise, second row-wise; one all-reduce.
- Embedding, positions, norms and the head stay whole on every rank (256 byte tokens make
  them small), so the tied embedding/head matrix stays one parameter untouched by TP;
  FSDP then shards it once, in the root group, where both modules use it.

Pipeline: a stage is ``GPTStage`` (embedding on the first, final norm and head on the
last, a range of blocks on each) with the full model's parameter names. The tied matrix
is used by the first and the last stage, on different ranks: the pipeline keeps one copy
per stage and sums their gradients (``plan.tied``), so the copies stay equal.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from neural_arch.apps.gpt.model import GPT
from neural_arch.distributed.parallel import FusedColwiseParallel, ParallelPlan, TensorPlan

TIED = ("embed.weight", "head.weight")
"""The embedding matrix, also the output head's weight."""


def blocks(model: GPT) -> list[nn.Module]:
    return list(model.blocks)


def heads(model: GPT) -> int:
    """Attention heads per block (the fused projection is 3 x heads x head_dim wide)."""
    attn = model.blocks[0].attn
    return attn.qkv.out_features // 3 // attn.head_dim


def tensor_plan(module: nn.Module) -> TensorPlan:
    """Styles for a ``GPT`` or a ``GPTStage`` (the patterns match block names in both)."""
    styles = {
        "blocks.*.attn.qkv": FusedColwiseParallel(parts=3),
        "blocks.*.attn.proj": RowwiseParallel(),
        "blocks.*.mlp.0": ColwiseParallel(),
        "blocks.*.mlp.2": RowwiseParallel(),
    }
    names = dict(module.named_parameters(remove_duplicate=False))
    return TensorPlan(styles=styles, tied=(TIED,) if all(n in names for n in TIED) else ())


class GPTStage(nn.Module):
    """Blocks ``blocks`` of a GPT, plus its embedding (``first``) and its norm and head (``last``).

    Holds the full model's own submodules under the same names (blocks keyed by their
    index in the full model), so parameter names and checkpoints match the full model.
    """

    def __init__(self, model: GPT, blocks: range, first: bool, last: bool) -> None:
        super().__init__()
        self.first, self.last, self.context = first, last, model.context
        if first:
            self.embed, self.pos, self.drop = model.embed, model.pos, model.drop
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in blocks})
        if last:
            self.ln_f, self.head = model.ln_f, model.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:  # as GPT.forward: bytes [B, T] -> embeddings [B, T, d]
            h = self.embed(x)
            if self.pos is not None:
                h = h + self.pos(torch.arange(x.shape[1], device=x.device))
            x = self.drop(h)
        for block in self.blocks.values():
            x = block(x)
        return self.head(self.ln_f(x)) if self.last else x


def parallel_plan() -> ParallelPlan:
    """The GPT app's answers for ``neural_arch.distributed.parallel``."""
    return ParallelPlan(blocks=blocks, tensor_plan=tensor_plan, stage=GPTStage, tied=(TIED,), heads=heads)
