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


def _shr_into(x: torch.Tensor, bits: int, out: torch.Tensor) -> torch.Tensor:
    """``out`` = logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    torch.bitwise_right_shift(x, bits, out=out)
    return out.bitwise_and_((1 << (64 - bits)) - 1)


def _mix_tensor_(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser elementwise, in place (with one scratch buffer: the tensors are as
    large as the activations, so each temporary would cost an allocation and its page faults);
    int64 multiplication wraps modulo 2**64 as intended."""
    scratch = torch.empty_like(x)
    x.bitwise_xor_(_shr_into(x, 30, scratch)).mul_(_signed(_MIX1))
    x.bitwise_xor_(_shr_into(x, 27, scratch)).mul_(_signed(_MIX2))
    return x.bitwise_xor_(_shr_into(x, 31, scratch))


def sample_key(seed: int, step: int, sample: int, call: int, lane: int = 0) -> int:
    """The 64-bit key of one sample's values in one random op (``lane``: a second stream of the
    same op, e.g. Box-Muller's second uniform)."""
    key = _GAMMA
    for part in (seed, step, sample, call, lane):
        key = _mix_int(key ^ (part & _MASK64))
    return key


def keyed_bits(keys: Sequence[int], shape: Sequence[int], bits: int, device: torch.device) -> torch.Tensor:
    """Random integers in [0, 2**bits) of ``shape``, whose first dimension holds ``len(keys)``
    samples (sample-major): sample i's values depend only on ``keys[i]`` and their position in it."""
    rows = len(keys)
    per_row = math.prod(shape) // rows if rows else 0
    key = torch.tensor([_signed(k) for k in keys], dtype=torch.int64, device=device).unsqueeze(1)
    counter = torch.arange(1, per_row + 1, dtype=torch.int64, device=device).mul_(_signed(_GAMMA)).unsqueeze(0)
    mixed = _mix_tensor_(key + counter)
    return mixed.bitwise_right_shift_(64 - bits).bitwise_and_((1 << bits) - 1).reshape(shape)


def keyed_uniform(keys: Sequence[int], shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Uniform [0, 1) values of ``shape`` (see ``keyed_bits``): k / 2**bits with as many bits as
    ``dtype`` has significand, so every value is exact and below 1."""
    bits = _BITS.get(dtype, 24)
    wide = torch.float64 if bits > 24 else torch.float32
    return keyed_bits(keys, shape, bits, device).to(wide).mul_(2.0**-bits).to(dtype)


def keyed_below(keys: Sequence[int], shape: Sequence[int], p: float, device: torch.device) -> torch.Tensor:
    """``keyed_uniform(..., float64) < p`` without the floats: k / 2**53 < p exactly when
    k < ceil(p * 2**53) (scaling by a power of two is exact)."""
    return keyed_bits(keys, shape, 53, device) < math.ceil(p * 2.0**53)
