"""FSDP gradient accumulation reduce-scatters once per optimizer step, not once per micro-batch.

Run: ``.venv/bin/python -m pytest tests/distributed/parallel/test_fsdp_accumulation.py -q``
2 real ranks over gloo (FSDP x2) against one process in the same test: a float64 MLP of two
FSDP groups (one block, then the root), 3 micro-batches of 4 samples per rank. Inside
``without_gradient_sync`` the backward must produce no sharded gradient and call no
reduce-scatter; the last backward reduce-scatters each group once, and the gradient of the
global batch's mean equals one process's within 1e-12 (float64; only summation order differs).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from neural_arch.distributed import init_process_group
from neural_arch.distributed.parallel import (
    ParallelLayout,
    apply_fsdp,
    build_mesh,
    data_parallel_loss,
    without_gradient_sync,
)
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess  # spawns ranks

MICRO, ROWS, WORLD = 3, 4, 2


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Sequential(nn.Linear(6, 8), nn.Tanh()), nn.Linear(8, 1)).double()


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    n = MICRO * ROWS * WORLD
    return torch.randn(n, 6, generator=g, dtype=torch.float64), torch.randn(n, 1, generator=g, dtype=torch.float64)


def reference() -> dict[str, torch.Tensor]:
    model, (x, y) = make_model(), data()
    ((model(x) - y) ** 2).mean().backward()
    return {name: p.grad for name, p in model.named_parameters()}


def worker(rank: int, world_size: int) -> dict:
    init_process_group(backend="gloo")
    layout = ParallelLayout(dp_shard=world_size)
    model = make_model()
    apply_fsdp(model, build_mesh(layout), layout, [model[0]])
    calls = []
    real = torch.distributed.reduce_scatter_single

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    torch.distributed.reduce_scatter_single = counted  # FSDP2 calls it through torch.distributed
    x, y = data()
    mine = torch.arange(rank, len(x), world_size).tensor_split(MICRO)  # this rank's share, in 3 parts
    after_local = []
    for j, rows in enumerate(mine):
        last = j == MICRO - 1
        with contextlib.nullcontext() if last else without_gradient_sync(model):
            per_sample = ((model(x[rows]) - y[rows]) ** 2).squeeze(1)
            data_parallel_loss(per_sample, len(x), world_size).backward()
        if not last:
            after_local.append((len(calls), [p.grad is None for p in model.parameters()]))
    grads = {name: p.grad.full_tensor().numpy() for name, p in model.named_parameters()}  # numpy: plain pickles
    return {"after_local": after_local, "calls": len(calls), "grads": grads}


def test_accumulated_micro_batches_reduce_scatter_once_and_equal_one_process():
    want = reference()
    for rank, got in enumerate(run_ranks(worker, WORLD)):
        for calls, grad_missing in got["after_local"]:
            assert calls == 0 and all(grad_missing), (rank, got["after_local"])  # nothing left the rank
        assert got["calls"] == 2, (rank, got["calls"])  # one reduce-scatter per FSDP group: block, root
        assert got["grads"].keys() == want.keys()
        for name, grad in want.items():
            torch.testing.assert_close(
                torch.from_numpy(got["grads"][name]), grad, rtol=1e-12, atol=1e-12, msg=f"rank {rank} {name}"
            )
