"""Train a tiny float64 GPT for a few Adam steps on one process or on any parallel layout.

Use: ``ref = reference_run(Setup())`` in the test process, ``run_ranks(runs_worker, n,
args=([Run(setup, layout), ...],))`` for some layouts, then ``compare(ref, results)`` per run. Both runs draw the same
global batches from ``DistributedSampler`` (46 samples in batches of 5: every step's shares
are uneven over 2 data-parallel ranks, and the last global batch has one sample, so one
rank's share is empty).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel

from neural_arch.apps.gpt.model import GPT, VOCAB
from neural_arch.apps.gpt.parallelize import parallel_plan, tensor_plan
from neural_arch.distributed import DistributedSampler, init_process_group
from neural_arch.distributed.parallel import (
    ParallelLayout,
    apply_activation_checkpointing,
    build_mesh,
    build_pipeline,
    data_parallel_loss,
    dp_rank,
    dp_size,
    is_dp_leader,
    pad_rows,
    parallelize_model,
)


@dataclass(frozen=True)
class Setup:
    """The model and data every run of one test shares."""

    layers: int = 4
    heads: int = 4
    d_model: int = 16
    context: int = 8
    positional: str = "rotary"
    samples: int = 46
    batch: int = 5
    lr: float = 1e-2


def build_model(setup: Setup) -> GPT:
    torch.manual_seed(0)
    return GPT(
        d_model=setup.d_model,
        n_layers=setup.layers,
        n_heads=setup.heads,
        mlp_ratio=2,
        dropout=0.0,
        positional=setup.positional,
        context=setup.context,
    ).double()


def data(setup: Setup) -> torch.Tensor:
    """[samples, context + 1] random bytes (fixed seed)."""
    return torch.randint(0, VOCAB, (setup.samples, setup.context + 1), generator=torch.Generator().manual_seed(1))


def sample_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-byte cross-entropy per sample [rows], as the GPT task's loss."""
    nats = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none")
    return nats.view(y.shape).mean(dim=1)


def batches(setup: Setup, replicas: int, rank: int) -> list[Any]:
    sampler = DistributedSampler(dataset_size=setup.samples, num_replicas=replicas, rank=rank, batch_size=setup.batch)
    return list(sampler)


def full_params(modules: list[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """Full (gathered) parameters by name; every rank of a DTensor's mesh must call this."""
    out = {}
    for module in modules:
        for name, p in module.named_parameters(remove_duplicate=False):  # a tied matrix under both names
            out[name] = (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
    return out


def reference_run(setup: Setup, checkpointing: int = 0) -> dict[str, Any]:
    """One process, whole global batches; ``checkpointing`` as ``ParallelLayout.activation_checkpointing``."""
    model = build_model(setup)
    apply_activation_checkpointing(list(model.blocks), checkpointing)
    opt = torch.optim.Adam(model.parameters(), lr=setup.lr)
    windows, losses = data(setup), []
    for ids in batches(setup, 1, 0):
        x, y = windows[ids, :-1], windows[ids, 1:]
        loss = sample_loss(model(x), y).sum() / ids.global_size
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": full_params([model])}


@dataclass(frozen=True)
class Run:
    """One training run on some layout. ``plain_qkv``: the naive column split of the fused
    q/k/v projection (a wrong plan, to show the comparison catches it)."""

    setup: Setup
    layout: ParallelLayout
    plain_qkv: bool = False


def runs_worker(rank: int, world: int, runs: list[Run]) -> list[dict[str, Any]]:
    """Train each run in turn on this rank (one process start for several layouts)."""
    init_process_group(backend="gloo")
    torch.use_deterministic_algorithms(True)
    return [layout_run(run.setup, run.layout, run.plain_qkv) for run in runs]


def layout_run(setup: Setup, layout: ParallelLayout, plain_qkv: bool = False) -> dict[str, Any]:
    """Train ``layout`` on this rank; returns its per-step global losses, full parameters, how
    many numbers of each it holds itself and the sequence lengths its norms ran on."""
    mesh = build_mesh(layout)
    model, plan = build_model(setup), parallel_plan()
    if plain_qkv:
        plan = dataclasses.replace(plan, tensor_plan=_plain_qkv_plan)
    windows, shares = data(setup), batches(setup, dp_size(mesh), dp_rank(mesh))
    if layout.pp > 1:
        capacity = math.ceil(math.ceil(setup.batch / layout.dp_size) / layout.microbatches)
        pipe = build_pipeline(model, layout, mesh, plan, sample_loss, capacity)
        modules, params = pipe.modules, list(pipe.parameters())
    else:
        modules = [parallelize_model(model, layout, mesh, plan)]
        params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=setup.lr)
    losses, tokens = [], _norm_tokens(modules)
    for ids in shares:
        x, y = windows[ids, :-1], windows[ids, 1:]
        opt.zero_grad()
        if layout.pp > 1:
            local = pipe.step(x, y, ids.global_size)
        else:  # an empty share runs one zero-weight padding row (DTensor cannot run on zero rows)
            per_sample = sample_loss(model(pad_rows(x, 1)), pad_rows(y, 1))
            data_parallel_loss(per_sample, ids.global_size, dp_size(mesh), valid=len(ids)).backward()
            local = per_sample.detach()[: len(ids)].sum().item()
        opt.step()
        losses.append(_global_loss(local if is_dp_leader(mesh) else 0.0, ids.global_size))
    held = {
        name: (p.to_local() if isinstance(p, DTensor) else p).numel()
        for m in modules
        for name, p in m.named_parameters(remove_duplicate=False)
    }
    # numpy, not tensors: torch would pass tensors through shared memory that dies with this process
    return {
        "losses": losses,
        "params": {k: v.numpy() for k, v in full_params(modules).items()},
        "held": held,
        "norm_tokens": sorted(tokens),
    }


def _norm_tokens(modules: list[torch.nn.Module]) -> set[int]:
    """Filled during training with the sequence lengths the blocks' first norms ran on here
    (the whole context, or this rank's sequence shard under sequence parallelism)."""
    tokens: set[int] = set()

    def record(module: torch.nn.Module, inputs: Any, out: torch.Tensor) -> None:
        tokens.add((out.to_local() if isinstance(out, DTensor) else out).shape[1])

    for module in modules:
        for name, sub in module.named_modules():
            if name.endswith(".ln1"):
                sub.register_forward_hook(record)
    return tokens


def _plain_qkv_plan(module: torch.nn.Module) -> Any:
    plan = tensor_plan(module)
    plan.styles["blocks.*.attn.qkv"] = ColwiseParallel()
    return plan


def _global_loss(local_sum: float, count: int) -> float:
    """Sum over ranks (each data-parallel share counted by its leader only) over the global count."""
    total = torch.tensor([local_sum], dtype=torch.float64)
    torch.distributed.all_reduce(total)
    return float(total.item()) / count


def compare(ref: dict[str, Any], results: list[dict[str, Any]]) -> tuple[float, float]:
    """(max parameter difference, max loss difference) of every rank against the reference;
    every parameter of the reference must be held, whole, by some rank."""
    worst_param = worst_loss = 0.0
    seen: set[str] = set()
    for result in results:
        diffs = [abs(a - b) for a, b in zip(result["losses"], ref["losses"], strict=True)]
        worst_loss = max([worst_loss] + [d if math.isfinite(d) else math.inf for d in diffs])
        for name, value in result["params"].items():
            worst_param = max(worst_param, float((torch.as_tensor(value) - ref["params"][name]).abs().max()))
            seen.add(name)
    missing = set(ref["params"]) - seen
    assert not missing, f"parameters no rank holds: {sorted(missing)}"
    return worst_param, worst_loss
