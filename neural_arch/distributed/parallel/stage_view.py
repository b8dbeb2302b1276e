"""Several pipeline stages of one rank seen as one module with the whole model's names.

Use: ``view = stage_view(runner.modules)``; ``view.named_parameters()`` and
``view.state_dict()`` then give names as in the full model (``blocks.3.mlp.0.weight``), so
DCP's ``get_model_state_dict(view)`` / ``get_optimizer_state_dict(view, optimizer)`` work
for an optimizer over all of this rank's stages. With one stage the view is the stage.

Why a view: an interleaved schedule gives a rank two stages, each a module with the full
model's names (``plan.stage``), and both hold a ``blocks`` container. The view rebuilds
only the containers the stages share (fresh empty modules) and hangs each stage's own
submodules, the real objects, under them: nothing is copied, and a parameter changed
through the view is changed in the stage.
"""

from __future__ import annotations

from typing import Sequence

from torch import nn


def stage_view(modules: Sequence[nn.Module]) -> nn.Module:
    """One module over ``modules`` (stages with disjoint parameters and full-model names)."""
    if len(modules) == 1:
        return modules[0]
    view = nn.Module()
    _merge(view, list(modules), "")
    return view


def _merge(target: nn.Module, sources: list[nn.Module], path: str) -> None:
    names: dict[str, None] = {}
    for source in sources:
        if any(v is not None for v in source._parameters.values()):
            raise ValueError(
                f"stage_view: {path or 'the stage root'} holds parameters itself in several stages; "
                "a stage's parameters must sit in submodules named as in the full model"
            )
        names.update(dict.fromkeys(name for name, child in source.named_children()))
    for name in names:
        found = {id(c): c for s in sources if (c := s._modules.get(name)) is not None}
        children = list(found.values())
        if len(children) == 1:
            target.add_module(name, children[0])
            continue
        holder = nn.Module()  # a container both stages have (e.g. ``blocks``): rebuilt, not shared
        target.add_module(name, holder)
        _merge(holder, children, f"{path}{name}.")
