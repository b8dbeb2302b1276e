"""A ``ParallelPlan`` read off a model whose repeated blocks are obvious: ``infer_plan(model)``.

Use: ``plan = resolve_plan(task_plan, model, layout)``: the app's own plan when it has one,
else the inferred one (the trainer does this before ``parallelize_model``); then
``parallelize_model(model, layout, mesh, plan)``. ``infer_plan(model)`` alone returns the
plan, or None when the model has no single obvious block list; ``tied_parameters(model)``
lists the parameters that are one tensor.

The rule: a block list is an ``nn.ModuleList`` or ``nn.Sequential`` of at least two children
of one class, each holding submodules of its own (so a ``Sequential`` of ``Linear`` layers or
a list of output heads is not one); lists inside a block (experts, sub-layers) do not count.
Every Hugging Face model has exactly one (a causal LM's ``transformer.h``,
or ``model.layers``); an encoder-decoder has two and is ambiguous. The
inferred plan names those blocks (FSDP shards each, activation checkpointing wraps each)
and the tied parameters; tensor and pipeline parallelism still need a hand-written plan,
since which Linear splits by columns is not in the structure.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from torch import nn

from neural_arch.distributed.parallel.layout import ParallelLayout
from neural_arch.distributed.parallel.plan import ParallelPlan

HOW_TO_WRITE_A_PLAN = (
    "give the task a plan: Task.parallel_plan() returning "
    "ParallelPlan(blocks=lambda model: list(model.NAME)) (docs/parallel.md, 'ParallelPlan')"
)


def block_lists(model: nn.Module) -> list[str]:
    """Names of the model's candidate block lists (outermost first; empty when there is none)."""
    found: list[str] = []
    for name, module in model.named_modules():
        if any(outer == "" or name.startswith(f"{outer}.") for outer in found):
            continue  # a list inside a block is part of that block
        if _is_block_list(module):
            found.append(name)
    return found


def tied_parameters(model: nn.Module) -> tuple[tuple[str, ...], ...]:
    """Groups of parameter names that are one tensor (e.g. an embedding and the output head)."""
    names: dict[int, list[str]] = defaultdict(list)
    for name, param in model.named_parameters(remove_duplicate=False):
        names[id(param)].append(name)
    return tuple(tuple(group) for group in names.values() if len(group) > 1)


def infer_plan(model: nn.Module) -> Optional[ParallelPlan]:
    """A plan naming the model's one block list and its tied parameters; None when there is no
    single candidate (see ``block_lists``)."""
    found = block_lists(model)
    if len(found) != 1:
        return None
    path = found[0]
    return ParallelPlan(blocks=lambda module: list(module.get_submodule(path)), tied=tied_parameters(model))


def resolve_plan(plan: Optional[ParallelPlan], model: nn.Module, layout: ParallelLayout) -> Optional[ParallelPlan]:
    """The app's plan if it has one, else the inferred one; a one-line ``ValueError`` when the
    layout asks for activation checkpointing and no single block list is found. Without
    checkpointing an uninferable model keeps FSDP of the whole model (no plan needed)."""
    if plan is not None:
        return plan
    inferred = infer_plan(model)
    if inferred is None and layout.activation_checkpointing:
        found = block_lists(model)
        what = (
            f"several block lists ({', '.join(found)})" if found else "no ModuleList or Sequential of identical blocks"
        )
        raise ValueError(
            f"parallel.activation_checkpointing={layout.activation_checkpointing} needs the model's blocks, "
            f"but {type(model).__name__} has {what}; {HOW_TO_WRITE_A_PLAN}, or set it to 0"
        )
    return inferred


def _is_block_list(module: nn.Module) -> bool:
    if not isinstance(module, (nn.ModuleList, nn.Sequential)):
        return False
    children = list(module.children())
    if len(children) < 2 or len({type(child) for child in children}) != 1:
        return False
    return all(next(child.children(), None) is not None for child in children)
