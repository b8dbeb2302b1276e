"""Per-sample keys and the draws made from them: each sample's values from its own seeded stream.

Used by keyed_random.py: ``keyed_draw(keys, shape, dtype, device, fill, generators)`` fills a
tensor whose first dimension holds ``len(keys)`` samples (sample-major) row by row, each row
from torch's generator seeded with that sample's key (``sample_key``: splitmix64 over the
seed, step, sample id, call number). The CPU generator is MT19937 and its ``uniform_`` and
``normal_`` run serially, so the values do not depend on threads, the machine's vendor or
how the batch was split. (An integer hash computed in tensor ops was tried first: exact too,
but 3-6x slower than torch's ``bernoulli_`` on a million values, as int64 tensor ops are.)
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB

Fill = Callable[[torch.Tensor, torch.Generator], object]
"""Fills one sample's row in place from a generator, e.g. ``lambda row, g: row.uniform_(generator=g)``."""


def _mix_int(value: int) -> int:
    """splitmix64's finaliser on a Python int."""
    value &= _MASK64
    value = ((value ^ (value >> 30)) * _MIX1) & _MASK64
    value = ((value ^ (value >> 27)) * _MIX2) & _MASK64
    return value ^ (value >> 31)


def sample_key(seed: int, step: int, sample: int, call: int) -> int:
    """The seed of one sample's values in one random op: all 64 bits depend on every part, and
    the low 32 (all that the CPU's MT19937 takes) are the high ones folded in."""
    key = _GAMMA
    for part in (seed, step, sample, call):
        key = _mix_int(key ^ (part & _MASK64))
    return (key ^ (key >> 32)) & 0xFFFFFFFF


def keyed_draw(
    keys: Sequence[int],
    shape: Sequence[int],
    dtype: torch.dtype,
    device: torch.device,
    fill: Fill,
    generators: dict[str, torch.Generator],
) -> torch.Tensor:
    """A new tensor of ``shape`` whose i-th sample's values are ``fill``'s from ``keys[i]``."""
    out = torch.empty(tuple(shape), dtype=dtype, device=device)
    device = out.device
    generator = generators.get(str(device))
    if generator is None:
        generator = generators[str(device)] = torch.Generator(device)
    for key, row in zip(keys, out.view(len(keys), -1)):
        generator.manual_seed(key)
        fill(row, generator)
    return out
