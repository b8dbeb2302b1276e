"""DDP equivalence: N ranks end with the parameters one process gets on the same global batches.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_ddp.py``

Float64 throughout; tolerance atol 1e-10 (only the summation order differs).
"""

import numpy as np
import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from neural_arch.distributed import (
    DistributedDataParallel,
    DistributedSampler,
    UnusedParametersError,
    all_gather,
    global_batch_loss,
    init_process_group,
    no_sync,
)
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess  # every test here spawns ranks or runs a launcher/scheduler

ATOL = 1e-10


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2)).double()


def make_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g, dtype=torch.float64)
    y = torch.randn(n, 2, generator=g, dtype=torch.float64)
    return x, y


def per_sample_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out - y) ** 2).sum(dim=1)


def batches(sampler: DistributedSampler, steps: int):
    """(epoch, IndexBatch) for the first ``steps`` global batches."""
    done, epoch = 0, 0
    while done < steps:
        sampler.set_epoch(epoch)
        for batch in sampler:
            yield batch
            done += 1
            if done == steps:
                return
        epoch += 1


def reference(n: int, batch: int, steps: int, shuffle: bool) -> list[np.ndarray]:
    """One process: plain mean loss over each whole global batch."""
    model, (x, y) = make_model(), make_data(n)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = DistributedSampler(dataset_size=n, num_replicas=1, rank=0, batch_size=batch, shuffle=shuffle, seed=7)
    for idx in batches(sampler, steps):
        opt.zero_grad()
        per_sample_loss(model(x[idx]), y[idx]).mean().backward()
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


def ddp_worker(rank, world_size, n, batch, steps, shuffle, accum, explicit_sync):
    init_process_group(backend="gloo")
    model = DistributedDataParallel(make_model(), bucket_size_mb=0.001)  # several buckets
    x, y = make_data(n)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = DistributedSampler(dataset_size=n, batch_size=batch, shuffle=shuffle, seed=7)
    sizes = []
    for idx in batches(sampler, steps):
        sizes.append(len(idx))
        opt.zero_grad()
        micro = np.array_split(np.asarray(idx, dtype=np.int64), accum)
        for j, part in enumerate(micro):
            part = torch.from_numpy(part)
            last = j == accum - 1
            if last and not explicit_sync:
                global_batch_loss(per_sample_loss(model(x[part]), y[part]), idx.global_size).backward()
            else:
                with no_sync(model):
                    global_batch_loss(per_sample_loss(model(x[part]), y[part]), idx.global_size).backward()
        model.sync_gradients()  # averages what no_sync left; a no-op after a synced backward
        model.sync_gradients()  # ... and calling it again never averages twice
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()], sizes


CASES = {
    # name: (n, global batch, steps, shuffle, micro-batches, sync via sync_gradients only)
    "shuffle": (48, 8, 6, True, 1, False),
    "uneven_last_batch_one_rank_empty": (17, 8, 6, True, 1, False),
    "accumulate_4_no_sync": (40, 16, 5, True, 4, False),
    "accumulate_then_sync_gradients": (21, 8, 5, False, 4, True),
}


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_ddp_matches_single_process(case, world_size):
    n, batch, steps, shuffle, accum, explicit = CASES[case]
    want = reference(n, batch, steps, shuffle)
    results = run_ranks(ddp_worker, world_size, args=(n, batch, steps, shuffle, accum, explicit))
    for rank, (params, _sizes) in enumerate(results):
        for got, ref in zip(params, want):
            np.testing.assert_allclose(got, ref, rtol=0, atol=ATOL, err_msg=f"rank {rank}")
    if case == "uneven_last_batch_one_rank_empty":
        # 17 = 8 + 8 + 1: the last global batch has one sample, so rank >= 1 gets none.
        assert results[0][1][2] == 1 and all(r[1][2] == 0 for r in results[1:])


def no_sync_worker(rank, world_size):
    init_process_group(backend="gloo")
    model = DistributedDataParallel(make_model())
    x, y = make_data(8)
    with model.no_sync():
        per_sample_loss(model(x[rank::2]), y[rank::2]).sum().backward()
    local = model.module[0].weight.grad.clone()
    gathered = all_gather(local)
    model.sync_gradients()
    synced = all_gather(model.module[0].weight.grad)
    return (
        (gathered[0] - gathered[1]).abs().max().item(),
        (synced[0] - synced[1]).abs().max().item(),
        (model.module[0].weight.grad - (gathered[0] + gathered[1]) / 2).abs().max().item(),
    )


def test_no_sync_really_skips_communication():
    for before, after, err in run_ranks(no_sync_worker, 2):
        assert before > 1e-3  # ranks kept their own gradients: nothing was communicated
        assert after == 0.0 and err < 1e-15  # sync_gradients averaged them


# Seed 003, "Gradient Synchronization Control", verbatim (after its import line).
SEED_003_NO_SYNC = """
with no_sync():
    for micro_batch in micro_batches[:-1]:
        output = model(micro_batch)
        loss = criterion(output, targets)
        loss.backward()  # No gradient sync

# Final batch with synchronization
output = model(micro_batches[-1])
loss = criterion(output, targets)
loss.backward()  # Gradients synchronized here
"""


def seed_micro_batches(rank: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    x, y = make_data(24)
    share = x[rank * 12 : (rank + 1) * 12]
    return [share[i : i + 4] for i in range(0, 12, 4)], y[rank * 4 : (rank + 1) * 4]


def seed_no_sync_worker(rank, world_size):
    init_process_group(backend="gloo")
    model = DistributedDataParallel(make_model())
    reductions = []

    def counting_hook(state, bucket):
        reductions.append(bucket.index())
        return allreduce_hook(state, bucket)

    model.torch_ddp.register_comm_hook(None, counting_hook)
    micro_batches, targets = seed_micro_batches(rank)
    exec(
        SEED_003_NO_SYNC,
        {
            "no_sync": no_sync,
            "model": model,
            "micro_batches": micro_batches,
            "targets": targets,
            "criterion": nn.MSELoss(),
        },
    )
    return [p.grad.numpy().copy() for p in model.module.parameters()], len(reductions)


def test_seed_003_bare_no_sync_accumulates_then_syncs_once():
    model, criterion = make_model(), nn.MSELoss()
    for rank in range(2):  # one process: the sum over micro-batches, averaged over ranks
        micro_batches, targets = seed_micro_batches(rank)
        for micro_batch in micro_batches:
            (criterion(model(micro_batch), targets) / 2).backward()
    expected = [p.grad for p in model.parameters()]
    for grads, reductions in run_ranks(seed_no_sync_worker, 2):
        assert reductions == 1  # one bucket, communicated once: after the last micro-batch only
        for got, ref in zip(grads, expected):
            np.testing.assert_allclose(got, ref.numpy(), rtol=0, atol=ATOL)


class PartlyUsed(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(3, 3)
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.used(x)


def unused_worker(rank, world_size):
    init_process_group(backend="gloo")
    model = DistributedDataParallel(PartlyUsed())
    x = torch.ones(2, 3)
    model(x).sum().backward()
    try:
        model(x).sum().backward()
    except UnusedParametersError as exc:
        return str(exc)
    return None


def test_unused_parameters_give_a_clear_error():
    for msg in run_ranks(unused_worker, 2):
        assert msg is not None
        assert "unused.weight" in msg and "unused.bias" in msg
        assert "find_unused_parameters=True" in msg


def test_world_size_one_wrapper_is_transparent():
    model = make_model()
    wrapped = DistributedDataParallel(model)
    x, _ = make_data(4)
    assert torch.equal(wrapped(x), model(x))
    assert list(wrapped.state_dict()) == [f"module.{k}" for k in model.state_dict()]
    with no_sync(wrapped), wrapped.no_sync():
        wrapped(x).sum().backward()
    once = [p.grad.clone() for p in model.parameters()]
    wrapped.sync_gradients()  # nothing to average at world size 1: gradients unchanged
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), once))
    with no_sync():  # the seeds' bare form: nothing to skip at world size 1; gradients accumulate
        wrapped(x).sum().backward()
    for p, g in zip(model.parameters(), once):
        torch.testing.assert_close(p.grad, 2 * g, rtol=0, atol=ATOL)
    with pytest.raises(ValueError, match="bucket_size_mb"):
        DistributedDataParallel(model, bucket_size_mb=0)
