"""Gradient compression on 2 real gloo ranks: fp16/bf16 gradients within the dtype's rounding of
the exact average, PowerSGD over several buckets trains, bad settings are one-line errors.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_compression.py``

Tolerance for fp16/bf16, per gradient element: each rank's g_r / 2 is rounded to the dtype
(relative error <= u) and the sum is rounded once more (<= u of the result), so
|compressed - exact| <= 2u * (|g_0| + |g_1|) / 2 + 2 * (the dtype's smallest subnormal), with
u = 2^-11 (fp16) or 2^-8 (bf16). The exact average is every rank's local fp32 gradient
gathered and averaged (what the default ``none`` computes).
"""

import pytest
import torch
from torch import nn

from neural_arch.distributed import DistributedDataParallel, all_gather, init_process_group
from neural_arch.distributed.data_parallel.compression import Compression
from tests.helpers.multiproc import run_ranks

UNIT_ROUNDOFF = {"fp16": 2.0**-11, "bf16": 2.0**-8}
SUBNORMAL = {"fp16": 2.0**-24, "bf16": 2.0**-133}


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


def data(rank: int, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x @ torch.linspace(-1, 1, 8).reshape(8, 1)  # learnable: a fixed linear map


def half_precision_errors(rank: int) -> dict[str, tuple[float, float]]:
    """Per setting: (largest error / its allowed bound, largest error) over every gradient element."""
    out = {}
    for name in ("fp16", "bf16"):
        exact_model = make_model()
        x, y = data(rank)
        nn.functional.mse_loss(exact_model(x), y).backward()
        local = [p.grad for p in exact_model.parameters()]
        gathered = [torch.stack(all_gather(g)) for g in local]  # [rank, ...] per parameter
        model = DistributedDataParallel(make_model(), compression=Compression(name), bucket_size_mb=0.01)
        nn.functional.mse_loss(model(x), y).backward()
        worst, largest = 0.0, 0.0
        for p, per_rank in zip(model.module.parameters(), gathered):
            exact = per_rank.mean(dim=0)
            bound = 2 * UNIT_ROUNDOFF[name] * per_rank.abs().mean(dim=0) + 2 * SUBNORMAL[name]
            err = (p.grad - exact).abs()
            worst, largest = max(worst, float((err / bound).max())), max(largest, float(err.max()))
        out[name] = (worst, largest)
    return out


def powersgd_losses(rank: int, steps: int) -> list[float]:
    """The mean loss over both ranks at every step of a PowerSGD run (rank 1, several buckets)."""
    settings = Compression("powersgd", powersgd_rank=1, powersgd_warmup_steps=2)
    model = DistributedDataParallel(make_model(), compression=settings, bucket_size_mb=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    assert len(model.torch_ddp.reducer._get_zeros_like_grad_buckets()) == 1  # before DDP rebuilds its buckets
    losses = []
    for step in range(steps):
        opt.zero_grad()
        x, y = data(rank, step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(torch.stack(all_gather(loss.detach())).mean()))
    layout = model._compressor.layout
    assert len(layout) >= 2 and model._compressor.memory, layout  # several buckets, compressed
    return losses


def worker(rank: int, world: int) -> dict:
    init_process_group(backend="gloo")
    torch.manual_seed(1)
    return {"half": half_precision_errors(rank), "powersgd": powersgd_losses(rank, 40)}


@pytest.fixture(scope="module")
def two_ranks() -> dict:
    return run_ranks(worker, world_size=2, timeout=120)[0]


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_half_precision_gradients_within_rounding_of_exact(two_ranks, name):
    worst, largest = two_ranks["half"][name]
    assert worst <= 1.0, f"{name}: an element is {worst:.2f}x its rounding bound"
    assert largest > 0, f"{name}: gradients equal the exact ones bit for bit: was anything compressed?"


@pytest.mark.multiprocess
def test_powersgd_on_gloo_with_several_buckets_trains(two_ranks):
    losses = two_ranks["powersgd"]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) / 5 < 0.4 * sum(losses[:5]) / 5, losses  # here: 0.55 vs 2.07


@pytest.mark.parametrize(
    "settings, key",
    [
        (Compression("zip"), "ddp.compression='zip'"),  # type: ignore[arg-type]
        (Compression("powersgd", powersgd_rank=0), "ddp.powersgd_rank=0"),
        (Compression("powersgd", powersgd_warmup_steps=1), "ddp.powersgd_warmup_steps=1"),
        (Compression("bf16", bucket_mb=0), "ddp.bucket_mb=0"),
    ],
)
def test_bad_settings_are_one_line_errors(settings, key):
    with pytest.raises(ValueError, match=key.replace("(", r"\(")) as info:
        DistributedDataParallel(make_model(), compression=settings)  # world size 1: checked all the same
    assert "\n" not in str(info.value)
