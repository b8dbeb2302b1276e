"""What scaling_model.py measures on this machine (not run on its own).

- ``profile(rank, args)`` (1 process, 1 thread): per model, the median forward (with loss),
  backward and optimizer time at the benchmark's per-rank batch, the time after the start of
  backward at which each parameter's gradient is ready (post-accumulate-grad hooks: the
  order and times DDP's buckets fill in), each gradient's bytes and shape, and the extra
  compute of compression (fp16 casts of the whole gradient; ``ddp.compression: powersgd``'s own
  step, ``low_rank.compress``, on the model's gradient with an all-reduce that sends nothing).
- ``concurrent_profile(rank, args)`` (on 2 or 4 ranks, no communication): the same compute
  profile taken on every rank at once, steps started together, so that what the ranks of a
  DDP run share (2 cores, memory bandwidth) slows it as it slows them; plus DDP's own copies
  of the gradient (each gradient scaled into its bucket, the bucket copied back: torch DDP's
  default, ``gradient_as_bucket_view=False``), timed the same way.
- ``allreduce_curve(rank, args)`` (on 2 or 4 gloo ranks): median time of one all-reduce of
  float32 tensors from 4 KiB to 64 MiB.
- ``ddp_steps(rank, args)`` (on 1, 2 or 4 gloo ranks): median step of torch DDP training
  each model at the same per-rank batch (weak scaling), timed between barriers.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from benchmarks.common.mlp import make_model as make_mlp
from neural_arch.apps.gpt.model import GPT
from neural_arch.apps.icenet.model import IceNetUNet
from neural_arch.distributed.data_parallel.low_rank import compress, first_memory, plan_bucket

MODELS = ("MLP", "U-Net", "GPT")
BATCH = {"MLP": 64, "U-Net": 8, "GPT": 16}
"""Per-rank batch: compression.py's MLP, half of configs/icenet.yaml's and configs/gpt.yaml's global batches."""
RANKS = (1, 2, 4)


def build(name: str) -> tuple[nn.Module, torch.optim.Optimizer, Callable[[nn.Module], torch.Tensor]]:
    """Model, its config's optimizer, and a loss on a fixed random batch of ``BATCH[name]``."""
    torch.manual_seed(0)
    b = BATCH[name]
    if name == "MLP":
        model = make_mlp()
        x, y = torch.randn(b, 64), torch.randint(0, 10, (b,))
        return (
            model,
            torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
            lambda m: nn.functional.cross_entropy(m(x), y),
        )
    if name == "U-Net":  # configs/icenet.yaml: 8 input channels (3 SIC lags + 5), 48 x 48 grid, 3 leads
        model = IceNetUNet(8, leads=3, widths=(16, 32, 64))
        x, y = torch.randn(b, 8, 48, 48), torch.randint(0, 3, (b, 3, 48, 48))
        return (
            model,
            torch.optim.AdamW(model.parameters(), lr=0.003),
            lambda m: nn.functional.cross_entropy(m(x).permute(0, 2, 1, 3, 4), y),
        )
    model = GPT(d_model=96, n_layers=4, n_heads=4, mlp_ratio=4, dropout=0.0, positional="rotary", context=128)
    tokens = torch.randint(0, 256, (b, 129))
    return (
        model,
        torch.optim.AdamW(model.parameters(), lr=0.003, betas=(0.9, 0.95), weight_decay=0.01),
        lambda m: nn.functional.cross_entropy(m(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()),
    )


def _one_profile(
    name: str, steps: int, together: Callable[[], Any] = lambda: None, compression: bool = True
) -> dict[str, Any]:
    """Compute profile of ``name``; ``together()`` runs before every timed step (a barrier
    when the ranks profile at once); ``compression``: also time compressing the gradient."""
    model, opt, loss_of = build(name)
    params = [p for p in model.parameters() if p.requires_grad]
    ready: dict[int, float] = {}
    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(lambda _p, i=i: ready.__setitem__(i, time.perf_counter()))
    times: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    ready_runs: list[list[float]] = []
    for step in range(steps + 3):
        opt.zero_grad(set_to_none=True)
        together()
        t0 = time.perf_counter()
        loss = loss_of(model)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if step >= 3:  # warm-up
            for key, value in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
                times[key].append(value)
            ready_runs.append([ready[i] - t1 for i in range(len(params))])
    return {
        **{k: statistics.median(v) for k, v in times.items()},
        "ready": [statistics.median(r[i] for r in ready_runs) for i in range(len(params))],
        "bytes": [p.numel() * p.element_size() for p in params],
        "shapes": [list(p.shape) for p in params],
        "batch": BATCH[name],
        "compress": _compression_costs(params) if compression else {},
        "ddp_copies": _ddp_copy_seconds([p.grad for p in params], together),
    }


def _ddp_copy_seconds(grads: list[torch.Tensor], together: Callable[[], Any], repeat: int = 5) -> float:
    """Median seconds of what torch DDP does to the gradients besides the all-reduce (its
    default, without gradient_as_bucket_view): scale each into its bucket, copy the bucket back."""
    bucket = torch.empty(sum(g.numel() for g in grads))
    views = torch.split(bucket, [g.numel() for g in grads])
    runs = []
    for _ in range(repeat + 1):
        together()
        start = time.perf_counter()
        for view, g in zip(views, grads):
            torch.mul(g.reshape(-1), 0.5, out=view)
        for view, g in zip(views, grads):
            g.copy_(view.view_as(g))
        runs.append(time.perf_counter() - start)
    return statistics.median(runs[1:])


def _compression_costs(params: list[nn.Parameter]) -> dict[str, float]:
    """Seconds of compression compute per step: fp16 round trip of the whole gradient; PowerSGD
    (rank 1, 2, 4): ``low_rank.compress`` on the whole gradient as one bucket, sending nothing."""
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    out: dict[str, float] = {"fp16": _median_s(lambda: flat.div(2).half().float(), 5)}
    grads = [v.view_as(p) for v, p in zip(flat.split([p.numel() for p in params]), params)]
    for r in (1, 2, 4):
        plan = plan_bucket(grads, r)
        memory = first_memory(plan, 0, flat)
        out[f"powersgd{r}"] = _median_s(lambda: compress(grads, plan, memory, 2, lambda t: None), 5)  # noqa: B023
    return out


def _median_s(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def profile(rank: int, args: Any) -> dict[str, Any]:
    return {name: _one_profile(name, args.steps) for name in MODELS}


def concurrent_profile(rank: int, args: Any) -> dict[str, Any]:
    """Every rank profiles at once (steps started by a barrier); rank 0's profile."""
    return {name: _one_profile(name, args.steps, dist.barrier, compression=False) for name in MODELS}


def allreduce_curve(rank: int, args: Any) -> dict[int, float]:
    """Median seconds of one float32 all-reduce per size in bytes (sizes interleaved per repeat)."""
    sizes = [4096 * 4**k for k in range(8)]  # 4 KiB .. 64 MiB
    runs: dict[int, list[float]] = {s: [] for s in sizes}
    for _ in range(args.repeat):
        for s in sizes:
            t = torch.ones(s // 4)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            runs[s].append(time.perf_counter() - start)
    return {s: statistics.median(v) for s, v in runs.items()}


def ddp_steps(rank: int, args: Any) -> dict[str, float]:
    """Median step (forward, backward with DDP's bucketed all-reduce, optimizer) per model."""
    out = {}
    for name in MODELS:
        model, opt, loss_of = build(name)
        wrapped = nn.parallel.DistributedDataParallel(model) if dist.get_world_size() > 1 else model
        runs = []
        for step in range(args.steps + 3):
            dist.barrier()
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss_of(wrapped).backward()
            opt.step()
            dist.barrier()
            if step >= 3:
                runs.append(time.perf_counter() - start)
        out[name] = statistics.median(runs)
    return out


def one_round(rank: int, args: Any) -> dict[str, Any]:
    """One round's measurements on this world size, back to back so that the machine's speed
    (which drifts by tens of percent within minutes on this VM) is the same for all three:
    the compute profile taken on every rank at once, the all-reduce curve, and DDP's steps."""
    world = dist.get_world_size()
    return {
        "profile": concurrent_profile(rank, args),
        "curve": allreduce_curve(rank, args) if world > 1 else None,
        "ddp": ddp_steps(rank, args),
    }
