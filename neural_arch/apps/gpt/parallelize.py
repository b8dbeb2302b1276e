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

Sequence parallelism (``parallel.sequence_parallel``): the residual stream is a DTensor
sharded on the sequence (``Shard(1)``). The embedding's output, whole on every rank, is
cut into sequence shards as it enters the stage's first block (no communication); ln1,
ln2 and ln_f are ``SequenceParallel`` on their shard; qkv and mlp.0 all-gather their input,
proj and mlp.2 reduce-scatter their output back to ``Shard(1)``; the head gets the whole
sequence back (an all-gather) and returns plain logits. A pipeline stage without the head
gathers its last block's output instead, so stage boundaries carry plain whole tensors.

Pipeline: a stage is ``GPTStage`` (embedding on the first, final norm and head on the
last, a range of blocks on each) with the full model's parameter names. The tied matrix
is used by the first and the last stage, on different ranks: the pipeline keeps one copy
per stage and sums their gradients (``plan.tied``), so the copies stay equal.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
)

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
    return TensorPlan(
        styles=styles,
        tied=(TIED,) if all(n in names for n in TIED) else (),
        sequence_parallel=sequence_parallel_styles(module),
    )


def sequence_parallel_styles(module: nn.Module) -> dict[str, ParallelStyle]:
    """The styles that ``sequence_parallel`` adds to or replaces in ``tensor_plan``'s for a GPT or a stage."""
    names = [name for name, _ in module.blocks.named_children()]  # "0".. in a GPT, global indices in a stage
    styles: dict[str, ParallelStyle] = {
        "blocks.*.ln1": SequenceParallel(),
        "blocks.*.ln2": SequenceParallel(),
        "blocks.*.attn.proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "blocks.*.mlp.0": ColwiseParallel(input_layouts=Shard(1)),
        "blocks.*.mlp.2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    }
    whole, shards = (Replicate(),), (Shard(1),)
    if hasattr(module, "head"):
        styles["ln_f"] = SequenceParallel()
        styles["head"] = PrepareModuleInput(input_layouts=shards, desired_input_layouts=whole, use_local_output=True)
    elif len(names) > 1:  # a pipeline stage before the last hands the next one a plain whole tensor
        styles[f"blocks.{names[-1]}"] = PrepareModuleOutput(output_layouts=shards, desired_output_layouts=whole)
    else:  # ... and its only block both cuts and gathers
        styles[f"blocks.{names[0]}"] = PrepareModuleInputOutput(
            input_layouts=whole,
            desired_input_layouts=shards,
            use_local_input=False,
            output_layouts=shards,
            desired_output_layouts=whole,
        )
        return styles
    # whole on every rank (the embedding's output or the previous stage's), cut locally
    styles[f"blocks.{names[0]}"] = PrepareModuleInput(input_layouts=whole, desired_input_layouts=shards)
    return styles


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
    return ParallelPlan(
        blocks=blocks, tensor_plan=tensor_plan, stage=GPTStage, tied=(TIED,), heads=heads, forward_methods=("cached",)
    )
