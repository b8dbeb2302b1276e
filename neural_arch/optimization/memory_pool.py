"""``memory_pool_scope()``: allocations inside go to one CUDA memory pool (a no-op on CPU).

Use: ``with memory_pool_scope() as pool: ...``. On CUDA, tensors allocated inside come from
a private ``torch.cuda.MemPool``, so one phase's short-lived blocks (e.g. the activations of
a step) are reused by the next step instead of fragmenting the shared caching allocator;
``pool`` is that ``MemPool`` (its ``snapshot()`` shows what it holds). Without CUDA there is
no pool to use and the scope yields ``None`` and changes nothing: CPU tensors come from the
system allocator either way.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

import torch


@contextmanager
def memory_pool_scope(device: Optional[torch.device] = None) -> Iterator[Optional[torch.cuda.MemPool]]:
    """Route CUDA allocations on ``device`` (default: the current one) into a fresh MemPool."""
    if not torch.cuda.is_available() or (device is not None and torch.device(device).type != "cuda"):
        yield None
        return
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool, device=device):
        yield pool
