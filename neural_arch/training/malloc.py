"""Give large freed blocks back to the operating system (glibc), so a sharded rank's resident
memory follows what it holds rather than the most it ever held.

Used by run_start.py for ``parallel:`` layouts: ``return_large_frees(LARGE_BLOCK)``.

Why: glibc serves an allocation from its heap unless it is at least the mmap threshold, and
it raises that threshold (up to 32 MiB) each time a mapped block is freed. FSDP gathers every
block's parameters before its forward and frees them after, and builds and frees a block's
gradients in backward: tens of MiB each, every step. After the first free, such blocks come
from the heap, where freed space is kept (fragmented) instead of returned, and a sharded rank's
resident memory climbs above what a replicated rank needs although it holds a fraction of the
state. A fixed threshold (setting it turns the raising off) maps every block of at least that
size on its own and unmaps it when freed (benchmarks/memory/ measures the effect).
Plain data parallelism keeps glibc's defaults. Elsewhere (another C library, no ``mallopt``) nothing changes.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (malloc.h)."""


def return_large_frees(threshold: int) -> bool:
    """Map allocations of at least ``threshold`` bytes on their own (returned on free); whether it applied."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: its own policy stays
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, threshold) == 1
