"""Tensor parallelism with DTensor: ``apply_tensor_parallel(model, mesh, plan)``.

Use: an app writes a ``TensorPlan`` next to its model (which submodule is column- or
row-wise sharded, e.g. ``apps/NAME/parallelize.py``); the trainer calls
``apply_tensor_parallel(model, build_mesh(layout), plan)`` before FSDP and the optimizer.

Column-wise then row-wise (Megatron's pairing) needs one all-reduce per pair in forward
and one in backward; everything between runs on this rank's slice (its heads, its MLP
columns) as plain tensors. ``FusedColwiseParallel`` shards a fused projection such as
attention's [q; k; v] by parts, so each rank holds the same heads of q, k and v.

Sequence parallelism (``apply_tensor_parallel(..., sequence_parallel=True)``, the layout's
``sequence_parallel``) adds the plan's ``TensorPlan.sequence_parallel`` styles: between the
pairs the residual stream is a DTensor sharded on the sequence dim (``Shard(1)``), so norms
and dropout hold 1/tp of the tokens; each column-wise input is all-gathered and each
row-wise output reduce-scattered, the same bytes as the all-reduce they replace.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Callable, Optional

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module
from torch.distributed.tensor.placement_types import _StridedShard


@dataclass
class TensorPlan:
    """What an app's tensor-parallel plan holds."""

    styles: dict[str, ParallelStyle]
    """Submodule name (``parallelize_module`` patterns, e.g. ``blocks.*.mlp.0``) -> its style."""
    tied: tuple[tuple[str, str], ...] = ()
    """Pairs of parameter names that are one tensor (weight tying); checked to stay one after the plan."""
    sequence_parallel: Optional[dict[str, ParallelStyle]] = None
    """Styles replacing or added to ``styles`` under sequence parallelism (norms as ``SequenceParallel``,
    row-wise outputs ``Shard(1)``, the model's sequence entry and exit points); None: the app offers none."""


class FusedColwiseParallel(ParallelStyle):
    """Column-wise sharding of an ``nn.Linear`` whose output is ``parts`` equal blocks side by side.

    Plain ``ColwiseParallel`` cuts the output dim into contiguous slices, so for a fused
    [q; k; v] projection on 2 ranks rank 0 would hold all of q and half of k. Here each
    part is cut separately and rank r holds [q_r; k_r; v_r]: in DTensor terms the weight
    is ``_StridedShard(0, split_factor=parts)`` (split into parts first, then each part
    over the ranks), so ``full_tensor()`` and checkpoints see the unchanged [q; k; v]
    matrix while the local output, [q_r, k_r, v_r] on the last dim, is what the model's
    own ``view(..., parts, -1, head_dim)`` expects of a projection holding fewer heads.

    An input that is a DTensor (e.g. sequence-sharded ``Shard(1)`` under sequence parallelism)
    is all-gathered to ``Replicate``; a plain tensor is taken as whole on every rank.

    The bias stays whole on every rank (DTensor slices it locally to match the output).
    This keeps FSDP composable: FSDP cuts a rank's local tensor into contiguous rows, which
    for [q_r; k_r; v_r] no DTensor placement can describe, so ``apply_fsdp`` shards such a
    strided weight along its input dim instead (see fsdp.py), and a 1-D bias has no such dim.
    """

    def __init__(self, parts: int) -> None:
        super().__init__()
        if parts < 1:
            raise ValueError(f"FusedColwiseParallel: parts={parts} must be >= 1")
        self.parts = parts

    def _partition(self, name: str, module: nn.Module, mesh: DeviceMesh) -> None:
        rows = module.weight.shape[0]
        if rows % (self.parts * mesh.size()):
            raise ValueError(
                f"FusedColwiseParallel: {name} has {rows} output rows, not {self.parts} parts "
                f"divisible by {mesh.size()} tensor-parallel ranks"
            )
        placements = {"weight": [_StridedShard(0, split_factor=self.parts)], "bias": [Replicate()]}
        for pname, param in list(module.named_parameters(recurse=False)):
            module.register_parameter(
                pname,
                nn.Parameter(distribute_tensor(param, mesh, placements[pname]), requires_grad=param.requires_grad),
            )

    @staticmethod
    def _input(mod: nn.Module, inputs: tuple[Any, ...], mesh: DeviceMesh) -> DTensor:
        x = inputs[0]
        # Every tensor-parallel rank needs the whole input; its backward all-reduces the
        # input's gradient (each rank's heads contribute a part of it), or reduce-scatters it
        # back to the sequence shards when the input came sequence-sharded.
        if not isinstance(x, DTensor):
            return DTensor.from_local(x, mesh, (Replicate(),), run_check=False)
        return x if x.placements == (Replicate(),) else x.redistribute(mesh, (Replicate(),))

    def _output(self, mod: nn.Module, out: DTensor, mesh: DeviceMesh) -> Any:
        placement = out.placements[0]
        # An internal check: a torch whose sharding propagation gave another layout here
        # would silently mix heads; fail instead.
        assert (
            isinstance(placement, _StridedShard)
            and placement.dim == out.ndim - 1
            and placement.split_factor == self.parts
        ), f"unexpected fused projection output layout {out.placements}"
        return out.to_local()

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        if not isinstance(module, nn.Linear):
            raise ValueError(f"FusedColwiseParallel shards nn.Linear only, got {type(module).__name__}")
        return distribute_module(
            module, device_mesh, self._partition, self._input, lambda mod, out, mesh: self._output(mod, out, mesh)
        )


def apply_tensor_parallel(
    model: nn.Module,
    mesh: DeviceMesh,
    plan: TensorPlan,
    sequence_parallel: bool = False,
    materialize: Callable[[nn.Module], None] = lambda module: None,
) -> nn.Module:
    """Shard ``model``'s submodules over the mesh's ``tp`` dim as ``plan`` says; returns ``model``.

    ``sequence_parallel``: also apply ``plan.sequence_parallel`` (a one-line error if it is None).
    ``materialize(submodule)`` runs just before each planned submodule is sharded (one entry of
    the plan at a time, so a deferred build holds one submodule's full weights at a time).
    """
    tp = mesh["tp"] if mesh.mesh_dim_names and "tp" in mesh.mesh_dim_names else mesh
    styles = dict(plan.styles)
    if sequence_parallel:
        if plan.sequence_parallel is None:
            raise ValueError(
                "parallel.sequence_parallel=true but the app's tensor plan has no sequence-parallel "
                "styles; set sequence_parallel=false"
            )
        styles.update(plan.sequence_parallel)
    for path, style in styles.items():
        for name, submodule in model.named_modules():
            if _matches(name, path):
                materialize(submodule)
        parallelize_module(model, tp, {path: style})
    for param in model.parameters():
        if isinstance(param, DTensor) and all(isinstance(p, Replicate) for p in param.placements):
            param.register_post_accumulate_grad_hook(_complete_grad)
    params = dict(model.named_parameters(remove_duplicate=False))
    for first, second in plan.tied:
        if params.get(first) is None or params.get(first) is not params.get(second):
            raise ValueError(
                f"tensor plan: {first} and {second} must stay one tensor (weight tying) but the plan "
                "made them two; shard both alike or neither"
            )
    return model


def _matches(name: str, path: str) -> bool:
    """``name`` is a module that ``parallelize_module`` resolves ``path`` to (atoms may be patterns)."""
    atoms, parts = path.split("."), name.split(".") if name else []
    return len(atoms) == len(parts) and all(fnmatch.fnmatch(part, atom) for part, atom in zip(parts, atoms))


def _complete_grad(param: nn.Parameter) -> None:
    """Make a replicated parameter's gradient replicated too (complete and equal on every rank).

    A norm that ran on this rank's sequence shard (sequence parallelism) leaves a ``Partial``
    gradient: the sum over this rank's tokens only. DTensor would all-reduce it lazily in
    every optimizer op that reads it; once here keeps gradient norms, clipping and the
    optimizer on plain replicated values. (Under FSDP these parameters are replaced and FSDP
    redistributes the gradient to the parameter's placement itself.)
    """
    grad = param.grad
    if isinstance(grad, DTensor) and grad.placements != param.placements:
        param.grad = grad.redistribute(param.device_mesh, param.placements)
