"""Keyed replacements of PyTorch's random ops: each takes its values from per-sample keys.

Used by keyed_random.py's dispatch mode: ``KEYED[func](draws, args, kwargs)`` for a random
aten op (``is_random``) whose output has the micro-batch's samples first (``out_shape``).
``draws.uniform(shape, dtype, device)`` and ``draws.normal(...)`` give the op's keyed values.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, Sequence

import torch

aten = torch.ops.aten


class Draws(Protocol):
    """The keyed values of the random op being replaced."""

    def uniform(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """Uniform [0, 1) values."""
        ...

    def normal(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """Standard normal values."""
        ...


def _mask_dtype(dtype: torch.dtype) -> torch.dtype:
    """Uniforms for a mask: float64 for float64 tensors, else float32 (as torch's own dropout)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _floating(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype.is_floating_point else torch.float64


def _gaussian(fw: Draws, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return fw.normal(shape, dtype, device)


def _out_kwargs(kwargs: dict[str, Any], like: torch.Tensor) -> tuple[torch.dtype, torch.device]:
    return kwargs.get("dtype") or like.dtype, kwargs.get("device") or like.device


def _inplace(fill: Callable[[Draws, torch.Tensor, tuple, dict], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def run(fw: Draws, args: tuple, kwargs: dict) -> torch.Tensor:
        target = args[0]
        with torch.no_grad():
            target.copy_(fill(fw, target, args, kwargs))
        return target

    return run


def _bernoulli_fill(fw: Draws, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    if not isinstance(p, torch.Tensor):
        return fw.uniform(t.shape, _mask_dtype(t.dtype), t.device) < p
    return fw.uniform(t.shape, torch.float64, t.device) < p.double()


def _uniform_fill(fw: Draws, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    low = args[1] if len(args) > 1 else kwargs.get("from", 0.0)
    high = args[2] if len(args) > 2 else kwargs.get("to", 1.0)
    return low + (high - low) * fw.uniform(t.shape, _floating(t.dtype), t.device)


def _normal_fill(fw: Draws, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    mean = args[1] if len(args) > 1 else kwargs.get("mean", 0.0)
    std = args[2] if len(args) > 2 else kwargs.get("std", 1.0)
    return mean + std * _gaussian(fw, t.shape, _floating(t.dtype), t.device)


def _exponential_fill(fw: Draws, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    rate = args[1] if len(args) > 1 else kwargs.get("lambd", 1.0)
    return -torch.log1p(-fw.uniform(t.shape, torch.float64, t.device)) / rate


def _bernoulli_probs(fw: Draws, args: tuple, kwargs: dict) -> torch.Tensor:
    probs = args[0]
    return (fw.uniform(probs.shape, torch.float64, probs.device) < probs.double()).to(probs.dtype)


def _bernoulli_p(fw: Draws, args: tuple, kwargs: dict) -> torch.Tensor:
    like, p = args[0], args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    return (fw.uniform(like.shape, torch.float64, like.device) < p).to(like.dtype)


def _rand_like(fw: Draws, args: tuple, kwargs: dict) -> torch.Tensor:
    dtype, device = _out_kwargs(kwargs, args[0])
    return fw.uniform(args[0].shape, dtype, device)


def _randn_like(fw: Draws, args: tuple, kwargs: dict) -> torch.Tensor:
    dtype, device = _out_kwargs(kwargs, args[0])
    return _gaussian(fw, args[0].shape, dtype, device)


def _factory(gaussian: bool) -> Callable[..., torch.Tensor]:
    def run(fw: Draws, args: tuple, kwargs: dict) -> torch.Tensor:
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        device = kwargs.get("device") or torch.device("cpu")
        shape = list(args[0])
        return _gaussian(fw, shape, dtype, device) if gaussian else fw.uniform(shape, dtype, device)

    return run


def _native_dropout(fw: Draws, args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    x, p = args[0], args[1]
    keep = fw.uniform(x.shape, _mask_dtype(x.dtype), x.device) >= p
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    return x * keep.to(x.dtype) * scale, keep


KEYED: dict[Any, Callable[..., Any]] = {
    aten.bernoulli_.float: _inplace(_bernoulli_fill),
    aten.bernoulli_.Tensor: _inplace(_bernoulli_fill),
    aten.uniform_.default: _inplace(_uniform_fill),
    aten.normal_.default: _inplace(_normal_fill),
    aten.exponential_.default: _inplace(_exponential_fill),
    aten.bernoulli.default: _bernoulli_probs,
    aten.bernoulli.p: _bernoulli_p,
    aten.rand_like.default: _rand_like,
    aten.randn_like.default: _randn_like,
    aten.rand.default: _factory(gaussian=False),
    aten.randn.default: _factory(gaussian=True),
    aten.native_dropout.default: _native_dropout,
}
"""Random ops drawn from the per-sample keys instead of the process's stream."""


def out_shape(func: Any, args: tuple) -> Optional[Sequence[int]]:
    if func in (aten.rand.default, aten.randn.default):
        return list(args[0])
    first = args[0] if args else None
    return first.shape if isinstance(first, torch.Tensor) else None


def is_random(func: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())


def draws_anything(func: Any, args: tuple) -> bool:
    """``native_dropout(x, p, train=False)`` (or ``p == 0``) draws nothing."""
    return func is not aten.native_dropout.default or bool(args[2] if len(args) > 2 else True) and args[1] > 0
