"""Exact global mean and standard deviation of data spread over ranks.

Try it: ``python -c "import numpy as np; from neural_arch.distributed import global_mean_std;
print(global_mean_std(np.random.rand(100, 3)))"`` (world size 1: numpy's answer).

Each rank reduces its own data to (count, mean, M2) in float64 with two passes, then the
per-rank triples are merged with Chan et al.'s pairwise update, in rank order, so every
rank computes bit-identical results. Unlike the sum / sum-of-squares formula
(``sqrt(E[x^2] - E[x]^2)``), which cancels catastrophically for data with a large offset
(``1e8 + N(0, 1e-3)`` gives a std more than 100% off), this stays accurate.
"""

from __future__ import annotations

import math
from typing import Sequence, TypeVar, Union

import numpy as np
import torch

from neural_arch.distributed.runtime.calls import counted
from neural_arch.distributed.runtime.collectives import all_gather
from neural_arch.distributed.runtime.guard import require_process_group
from neural_arch.distributed.runtime.process_group import get_rank

T = TypeVar("T", torch.Tensor, np.ndarray)
Dims = Union[int, Sequence[int]]


def _as_float64(x: Union[torch.Tensor, np.ndarray]) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.asarray(x, dtype=np.float64))
    if isinstance(x, torch.Tensor):
        return x.detach().to(device="cpu", dtype=torch.float64)
    raise ValueError(f"global_mean_std: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}.")


def _flatten_reduced(x: torch.Tensor, dim: Dims) -> torch.Tensor:
    """Move the reduced dims to the front and merge them into one: shape [n, *features]."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    if x.dim() == 0:
        raise ValueError("global_mean_std: got a 0-d value; pass an array with a sample dimension.")
    if not dims or any(not -x.dim() <= d < x.dim() for d in dims):
        raise ValueError(f"global_mean_std: dim={dim!r} is invalid for shape {tuple(x.shape)}.")
    dims = sorted({d % x.dim() for d in dims})
    keep = [d for d in range(x.dim()) if d not in dims]
    moved = x.permute(dims + keep)
    # why not -1: reshape cannot infer it when a kept dimension is 0 (no elements at all)
    count = math.prod(x.shape[d] for d in dims)
    return moved.reshape((count,) + tuple(x.shape[d] for d in keep))


def local_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(count, mean, M2) of float64 samples along dim 0; two passes for accuracy."""
    n = torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device)  # stacked with x's moments
    if x.shape[0] == 0:
        zeros = torch.zeros(x.shape[1:], dtype=torch.float64, device=x.device)
        return n, zeros, zeros.clone()
    mean = x.mean(dim=0)
    m2 = ((x - mean) ** 2).sum(dim=0)
    return n, mean, m2


def merge_moments(
    parts: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Combine (count, mean, M2) triples with Chan's parallel update, in the given order."""
    n, mean, m2 = parts[0]
    for nb, mean_b, m2_b in parts[1:]:
        if nb == 0:
            continue
        if n == 0:
            n, mean, m2 = nb, mean_b, m2_b
            continue
        total = n + nb
        delta = mean_b - mean
        mean = mean + delta * (nb / total)
        m2 = m2 + m2_b + delta * delta * (n * nb / total)
        n = total
    return n, mean, m2


@counted("global_mean_std")  # one call of the script, though it gathers inside
def global_mean_std(x: T, dim: Dims = 0, unbiased: bool = False) -> tuple[T, T]:
    """Mean and std over ``dim`` of the data of *all* ranks together (float64 inside).

    Each rank passes its local samples; a rank with none passes an empty array with the
    right trailing shape. Returns numpy arrays for numpy input, float64 torch tensors (on
    the input's device) otherwise. ``unbiased=True`` divides by ``n - 1``. With no
    samples anywhere (or n <= 1 unbiased) the std is NaN, as in numpy.
    """
    require_process_group("global_mean_std")  # before the try below turns its ValueError into a shape error
    data = _flatten_reduced(_as_float64(x), dim)
    n, mean, m2 = local_moments(data)
    # Shape [3, *features]: all_gather's shape check then compares every rank's per-sample
    # shape, so ranks that disagree fail loudly instead of merging misaligned numbers.
    packed = torch.stack([n.expand(mean.shape), mean, m2])
    try:
        gathered = all_gather(packed)
    except ValueError as exc:
        raise ValueError(
            f"global_mean_std on rank {get_rank()}: ranks passed samples of different shapes "
            f"(this rank: {tuple(data.shape[1:])} after reducing dim={dim!r} of {tuple(x.shape)}); "
            "every rank must pass the same non-reduced dimensions, a rank without data an "
            f"empty array such as shape (0, ...). Details: {exc}"
        ) from exc
    no_features = torch.tensor(0.0, dtype=torch.float64, device=data.device)  # count is irrelevant then
    parts = [(p[0].reshape(-1)[0] if p[0].numel() else no_features, p[1], p[2]) for p in gathered]
    n, mean, m2 = merge_moments(parts)
    divisor = n - 1 if unbiased else n
    std = torch.sqrt(m2 / divisor) if divisor > 0 else torch.full_like(m2, float("nan"))
    if n == 0:
        mean = torch.full_like(mean, float("nan"))
    shape = data.shape[1:]
    mean, std = mean.reshape(shape), std.reshape(shape)
    if isinstance(x, np.ndarray):
        return mean.numpy(), std.numpy()  # type: ignore[return-value]
    return mean.to(x.device), std.to(x.device)  # type: ignore[return-value]
