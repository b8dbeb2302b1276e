"""The exact BatchNorm against torch's ``nn.BatchNorm2d`` run on the whole global batch.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_batch_norm.py -q``

The parent makes the global batch and computes the reference (one ``nn.BatchNorm2d`` on all
rows: outputs, gradients, running statistics after two training forwards). Ranks hold uneven
shares of it, one of them none; their outputs, input gradients, summed parameter gradients and
running statistics must equal the reference (float64). The data have an offset of 1e6, where a
sum-of-squares variance keeps 4 digits; ``x - mean`` itself cancels 6 of float64's 16, which
is what bounds any implementation's outputs and gradients (1e-9 here), torch's included.
"""

import copy

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from neural_arch.distributed import init_process_group
from neural_arch.distributed.data_parallel.batch_norm import ExactBatchNorm2d, ExactSyncBatchNorm, make_exact
from tests.helpers.multiproc import run_ranks

SHARES = {2: [0, 5], 3: [3, 0, 2]}  # rows of each rank in every step


def make_layer(momentum=0.1):
    torch.manual_seed(0)
    layer = nn.BatchNorm2d(3, momentum=momentum).double()
    with torch.no_grad():  # not the initial 1 and 0, so their gradients and use are checked
        layer.weight.uniform_(0.5, 1.5)
        layer.bias.uniform_(-1.0, 1.0)
    return layer


def make_steps(rows, steps=2):
    g = torch.Generator().manual_seed(rows)
    return [
        (1e6 + torch.randn(rows, 3, 4, 5, generator=g, dtype=torch.float64), torch.randn(rows, 3, 4, 5, generator=g))
        for _ in range(steps)
    ]


def run_layer(layer, steps, world_rows=None):
    """Outputs and gradients of each step's loss ``sum(y * target) / global rows``, then the state."""
    out = []
    for x, target in steps:
        x = x.clone().requires_grad_()
        layer.zero_grad()
        y = layer(x)
        ((y * target.double()).sum() / (world_rows or len(x))).backward()
        out.append((y.detach(), x.grad, layer.weight.grad.clone(), layer.bias.grad.clone()))
    return out, {k: v.clone() for k, v in layer.state_dict().items()}


def test_one_process_equals_torch_and_keeps_its_state_dict():
    steps = make_steps(6, steps=3)
    for momentum in (0.1, None):
        reference = make_layer(momentum)
        exact = make_exact(copy.deepcopy(reference))
        assert isinstance(exact, ExactBatchNorm2d) and isinstance(exact, nn.BatchNorm2d)
        assert list(exact.state_dict()) == list(reference.state_dict())
        got, want = run_layer(exact, steps), run_layer(reference, steps)
        for mine, theirs in zip(got[0], want[0]):
            for a, b in zip(mine, theirs):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-9)  # outputs of size ~1 from inputs ~1e6
        for key, value in want[1].items():
            torch.testing.assert_close(got[1][key], value, rtol=1e-12, atol=0)
        x = steps[0][0]
        torch.testing.assert_close(exact.eval()(x), reference.eval()(x), rtol=0, atol=1e-9)


def test_a_checkpointed_recompute_does_not_update_running_stats_twice():
    layer = make_exact(make_layer())
    x = torch.randn(4, 3, 2, 2, dtype=torch.float64, requires_grad=True)
    checkpoint(layer, x, use_reentrant=False).sum().backward()
    assert int(layer.num_batches_tracked) == 1
    torch.testing.assert_close(layer.running_mean, 0.1 * x.detach().mean((0, 2, 3)), rtol=1e-12, atol=0)


def test_sync_batch_norm_becomes_exact_and_runs_on_cpu():
    layer = make_exact(nn.SyncBatchNorm(3).double())
    assert isinstance(layer, ExactSyncBatchNorm) and not isinstance(
        layer, nn.SyncBatchNorm
    )  # torch's DDP refuses those on CPU
    y = layer(torch.randn(4, 3, 5, dtype=torch.float64))
    torch.testing.assert_close(y.mean((0, 2)), torch.zeros(3, dtype=torch.float64), rtol=0, atol=1e-12)


def rank_worker(rank, world_size, steps_per_rank, world_rows):
    init_process_group(backend="gloo", timeout=30)
    exact = make_exact(make_layer())  # built here: a layer passed in would share its buffers between ranks
    out, state = run_layer(exact, steps_per_rank[rank], world_rows)
    for _, _, weight_grad, bias_grad in out:  # what DDP's average times the world size is
        dist.all_reduce(weight_grad)
        dist.all_reduce(bias_grad)
    # numpy: torch tensors would travel through shared memory that dies with this process
    return [[t.numpy() for t in step] for step in out], {k: v.numpy() for k, v in state.items()}


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_with_uneven_and_empty_shares_equal_one_batch_norm_on_the_global_batch(world_size):
    shares = SHARES[world_size]
    whole = make_steps(sum(shares))
    reference, want_state = run_layer(make_layer(), whole)
    starts = [sum(shares[:r]) for r in range(world_size)]
    per_rank = [[(x[s : s + n], t[s : s + n]) for x, t in whole] for s, n in zip(starts, shares)]
    results = run_ranks(rank_worker, world_size, args=(per_rank, sum(shares)), timeout=90)
    for rank, (out, state) in enumerate(results):
        out = [[torch.from_numpy(t) for t in step] for step in out]
        state = {k: torch.from_numpy(v) for k, v in state.items()}
        rows = slice(starts[rank], starts[rank] + shares[rank])
        for (y, x_grad, w_grad, b_grad), (ry, rx_grad, rw_grad, rb_grad) in zip(out, reference):
            torch.testing.assert_close(y, ry[rows], rtol=0, atol=1e-9)
            torch.testing.assert_close(x_grad, rx_grad[rows], rtol=0, atol=1e-9)
            torch.testing.assert_close(w_grad, rw_grad, rtol=0, atol=1e-8)  # a sum of 100 such values
            torch.testing.assert_close(b_grad, rb_grad, rtol=0, atol=1e-12)
        for key, value in want_state.items():
            torch.testing.assert_close(state[key], value, rtol=1e-10, atol=0)
        assert all((state[k].numpy() == results[0][1][k]).all() for k in state)  # bitwise the same on every rank
