"""Gradient compression for ``DistributedDataParallel``: fp16, bf16 or PowerSGD, on gloo and NCCL.

Use: ``DistributedDataParallel(model, compression=Compression("powersgd", powersgd_rank=2))``,
or in a trainer config ``ddp: {compression: powersgd, powersgd_rank: 2}``. The default
``none`` all-reduces the exact fp32/fp64 gradients; every other setting trades exactness for
less communication, so N ranks no longer compute what one process would.

- ``fp16``: torch's ``fp16_compress_hook`` (gradients divided by the world size, cast to
  float16, summed, cast back). Works on gloo as on NCCL.
- ``bf16``: the same cast to bfloat16. torch's own ``bf16_compress_hook`` is refused by DDP
  on any build without CUDA + NCCL >= 2.10 (a check on the hook's *name* in
  ``DistributedDataParallel._check_comm_hook``, torch 2.13), although gloo sums bfloat16
  tensors correctly; ``bf16_hook`` below is that cast under another name, used on both.
- ``powersgd``: rank-r approximation with error feedback and warm start (``low_rank.py``:
  our own step; torch's ``powerSGD_hook`` does more memory work per step), plain all-reduce for the
  first ``powersgd_warmup_steps`` steps. Its state (``powersgd.py``) is saved with the
  checkpoint so a resumed run is the same compressed run.
"""

# No "from __future__ import annotations": DDP compares a hook's annotations with the real
# dist.GradBucket / Future types and refuses strings.
from dataclasses import dataclass
from typing import Literal, Optional

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

from neural_arch.distributed.data_parallel.powersgd import PowerSGDCompressor, powersgd_hook

CompressionName = Literal["none", "fp16", "bf16", "powersgd"]
CHOICES: tuple[str, ...] = ("none", "fp16", "bf16", "powersgd")


@dataclass
class Compression:
    """How data-parallel gradients travel: the ``ddp:`` section of a trainer config."""

    compression: CompressionName = "none"
    """``none`` (exact), ``fp16``/``bf16`` (half the bytes, rounded), ``powersgd`` (low-rank, error feedback)."""
    powersgd_rank: int = 2
    """PowerSGD's approximation rank: higher is closer to exact and sends more."""
    powersgd_warmup_steps: int = 10
    """Steps of plain all-reduce before PowerSGD starts (>= 2: DDP settles its buckets after step 1)."""
    bucket_mb: float = 25.0
    """DDP gradient bucket size in MiB (torch's default 25)."""

    def check(self) -> None:
        """One-line ``ValueError`` naming the key, the value and the fix."""
        if self.compression not in CHOICES:
            raise ValueError(f"ddp.compression={self.compression!r}: must be one of {', '.join(CHOICES)}")
        if isinstance(self.powersgd_rank, bool) or not isinstance(self.powersgd_rank, int) or self.powersgd_rank < 1:
            raise ValueError(f"ddp.powersgd_rank={self.powersgd_rank!r}: must be an integer >= 1 (e.g. 2)")
        if (
            isinstance(self.powersgd_warmup_steps, bool)
            or not isinstance(self.powersgd_warmup_steps, int)
            or self.powersgd_warmup_steps < 2
        ):
            raise ValueError(
                f"ddp.powersgd_warmup_steps={self.powersgd_warmup_steps!r}: must be an integer >= 2 "
                "(DDP rebuilds its buckets after the first step; PowerSGD can start after that)"
            )
        if not self.bucket_mb > 0:
            raise ValueError(f"ddp.bucket_mb={self.bucket_mb!r}: must be > 0 (torch's default is 25)")


def bf16_hook(
    process_group: Optional[dist.ProcessGroup], bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """Average ``bucket`` as bfloat16: divide by the world size, cast, sum, cast back in place."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    # Divide before casting, as torch's hooks do: the sum of N values then cannot overflow.
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size(group))

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value()[0])
        return buffer

    return dist.all_reduce(compressed, group=group, async_op=True).get_future().then(decompress)


def attach(
    ddp: torch.nn.parallel.DistributedDataParallel, module: torch.nn.Module, settings: Compression, bucket_mb: float
) -> Optional[PowerSGDCompressor]:
    """Register the hook ``settings`` asks for on a torch DDP object built with ``bucket_mb``;
    the PowerSGD state, if any (``settings.bucket_mb`` is the trainer's way to set ``bucket_mb``)."""
    settings.check()
    if settings.compression == "fp16":
        ddp.register_comm_hook(None, fp16_compress_hook)
    elif settings.compression == "bf16":
        ddp.register_comm_hook(None, bf16_hook)
    elif settings.compression == "powersgd":
        compressor = PowerSGDCompressor(module, settings.powersgd_rank, settings.powersgd_warmup_steps, bucket_mb)
        ddp.register_comm_hook(compressor, powersgd_hook)
        return compressor
    return None
