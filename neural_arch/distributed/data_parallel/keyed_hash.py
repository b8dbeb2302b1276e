"""The counter-based hash behind keyed random draws: integers in, uniform floats out.

Used by keyed_ops.py: ``keyed_uniform([sample_key(seed, step, sample, call)], [1, 3], dtype, device)``.
splitmix64's finaliser on (key + element counter * its odd increment), in int64 tensor ops
whose multiplication wraps modulo 2**64, so any machine (CPU or GPU) draws the same values
(tests check the tensor arithmetic against Python's integers).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment (odd, so element counters never collide)
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_BITS = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
"""Random bits per value: at most the format's significand, so ``k / 2**bits`` is exact and < 1."""


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch stores it."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _mix_int(value: int) -> int:
    """splitmix64's finaliser on a Python int (the per-sample keys)."""
    value &= _MASK64
    value = ((value ^ (value >> 30)) * _MIX1) & _MASK64
    value = ((value ^ (value >> 27)) * _MIX2) & _MASK64
    return value ^ (value >> 31)


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix_tensor(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser elementwise; int64 multiplication wraps modulo 2**64 as intended."""
    x = (x ^ _shr(x, 30)) * _signed(_MIX1)
    x = (x ^ _shr(x, 27)) * _signed(_MIX2)
    return x ^ _shr(x, 31)


def sample_key(seed: int, step: int, sample: int, call: int, lane: int = 0) -> int:
    """The 64-bit key of one sample's values in one random op (``lane``: a second stream of the
    same op, e.g. Box-Muller's second uniform)."""
    key = _GAMMA
    for part in (seed, step, sample, call, lane):
        key = _mix_int(key ^ (part & _MASK64))
    return key


def keyed_uniform(keys: Sequence[int], shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Uniform [0, 1) values of ``shape`` whose first dimension holds ``len(keys)`` samples
    (sample-major): sample i's values depend only on ``keys[i]`` and their position in it."""
    rows = len(keys)
    per_row = math.prod(shape) // rows if rows else 0
    key = torch.tensor([_signed(k) for k in keys], dtype=torch.int64, device=device).unsqueeze(1)
    counter = torch.arange(1, per_row + 1, dtype=torch.int64, device=device).unsqueeze(0)
    bits = _BITS.get(dtype, 24)
    drawn = _shr(_mix_tensor(key + counter * _signed(_GAMMA)), 64 - bits)
    wide = torch.float64 if bits > 24 else torch.float32
    return (drawn.to(wide) * 2.0**-bits).to(dtype).reshape(shape)
