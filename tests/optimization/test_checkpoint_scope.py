"""The seeds' memory API: ``checkpoint_scope`` recomputes instead of storing, with equal gradients.

Run: ``.venv/bin/python -m pytest tests/optimization -q``
Bytes saved for backward are counted with ``torch.autograd.graph.saved_tensors_hooks``.
"""

import numpy as np
import pytest
import torch
from torch import nn

from neural_arch.apps.gpt.model import GPT
from neural_arch.optimization import checkpoint_scope, gradient_checkpointing, memory_pool_scope
from tests.helpers.multiproc import run_ranks


def tiny_gpt(dropout: float = 0.0) -> GPT:
    torch.manual_seed(0)
    return GPT(d_model=16, n_layers=3, n_heads=2, mlp_ratio=2, dropout=dropout, context=12).double()


def grads_and_saved_bytes(model: nn.Module, x: torch.Tensor, scoped: bool) -> tuple[list[torch.Tensor], int]:
    model.zero_grad()
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    torch.manual_seed(1)  # the same dropout masks in both runs
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with checkpoint_scope() if scoped else torch.enable_grad():
            model(x).logsumexp(-1).mean().backward()
    return [p.grad.clone() for p in model.parameters()], saved[0]


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_gradients_are_unchanged_and_far_fewer_bytes_are_saved(dropout):
    model, x = tiny_gpt(dropout).train(), torch.randint(0, 256, (4, 12), generator=torch.Generator().manual_seed(2))
    plain, plain_bytes = grads_and_saved_bytes(model, x, scoped=False)
    scoped, scoped_bytes = grads_and_saved_bytes(model, x, scoped=True)
    for a, b in zip(plain, scoped):
        assert torch.equal(a, b)  # recomputation repeats the same operations (dropout replays its RNG)
    assert scoped_bytes < 0.5 * plain_bytes, (scoped_bytes, plain_bytes)


def test_segments_are_the_roots_direct_calls_and_sequential_is_looked_through():
    with checkpoint_scope() as calls:
        tiny_gpt()(torch.zeros(1, 4, dtype=torch.long))
    assert calls.segments == ["Embedding", "Dropout", "Block", "Block", "Block", "LayerNorm", "Linear"]
    with checkpoint_scope() as calls:
        nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))(torch.ones(2, 3))
    assert calls.segments == ["Linear", "ReLU", "Linear"]


def test_the_scope_restores_module_call_even_on_error_and_nests():
    original = nn.Module.__call__
    with pytest.raises(ZeroDivisionError):
        with checkpoint_scope():
            with checkpoint_scope() as inner:
                tiny_gpt()(torch.zeros(1, 4, dtype=torch.long))
                assert len(inner.segments) == 7  # the outer scope's record: counted once
                raise ZeroDivisionError  # leaves both scopes by an exception
    assert nn.Module.__call__ is original
    assert gradient_checkpointing.checkpoint_scope is checkpoint_scope


def test_memory_pool_scope_is_a_no_op_without_cuda():
    with memory_pool_scope() as pool:
        t = torch.ones(3)
    assert pool is None and t.sum() == 3


def seeds_snippet_worker(rank, world_size, scoped):
    import neural_arch.distributed as nd

    nd.init_process_group(backend="gloo")
    ddp_model = nd.DistributedDataParallel(tiny_gpt())
    g = torch.Generator().manual_seed(10 + rank)  # every rank its own samples
    batch, targets = torch.randint(0, 256, (3, 12), generator=g), torch.randint(0, 256, (3, 12), generator=g)

    def criterion(out, y):
        return nn.functional.cross_entropy(out.reshape(-1, 256), y.reshape(-1))

    if scoped:
        # seed 003, "Memory Optimization", as written:
        from neural_arch.optimization import gradient_checkpointing, memory_pool_scope

        # Enable gradient checkpointing for memory efficiency
        with gradient_checkpointing.checkpoint_scope():
            with memory_pool_scope():
                # Distributed training with memory optimizations
                output = ddp_model(batch)
                loss = criterion(output, targets)
                loss.backward()
    else:
        output = ddp_model(batch)
        loss = criterion(output, targets)
        loss.backward()
    return [p.grad.numpy().copy() for p in ddp_model.module.parameters()]  # numpy: tensors would travel by fd


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_seeds_snippet_on_two_processes_gives_the_same_averaged_gradients():
    plain = run_ranks(seeds_snippet_worker, 2, args=(False,), timeout=120)
    scoped = run_ranks(seeds_snippet_worker, 2, args=(True,), timeout=120)
    for rank in range(2):
        for a, b in zip(plain[rank], scoped[rank]):
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-15)
    for a, b in zip(scoped[0], scoped[1]):  # DDP averaged them: equal on both ranks
        np.testing.assert_array_equal(a, b)
