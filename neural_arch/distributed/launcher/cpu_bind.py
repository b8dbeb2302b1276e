"""Give each local worker its own CPU cores (``--cpu-bind auto``, the default; ``none`` to leave placement to the OS).

Run: ``python -m neural_arch.distributed.launcher --nproc_per_node=2 --cpu-bind none script.py`` to
turn it off; a worker sees its cores with ``os.sched_getaffinity(0)``.

Why: two single-threaded ranks of the sea-ice U-Net on this machine's 2 cores took 148 ms a
step when the OS placed them, 107-120 ms when each was pinned to one core (torch DDP over
gloo, same code, benchmarks/README.md "Threads or processes"): unpinned, the ranks' gloo,
heartbeat and prefetch threads wake on the busy cores and the main threads migrate, losing
their caches. ``srun --cpu-bind`` and ``mpirun --bind-to core`` bind for this reason; torchrun
does not bind CPU workers.

When ``auto`` binds: the job's workers times their threads (OMP_NUM_THREADS, or the
launcher's default of cores / workers) fill every CPU this launcher may use (its affinity
mask, e.g. a SLURM allocation), and there are at least as many CPUs as workers. A job that
uses only part of a shared machine is not bound: two such jobs would otherwise both pin to
the first cores. Local rank r gets the r-th contiguous slice of len(cpus) // workers CPUs.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence

MODES = ("auto", "none")


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity mask), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def default_threads(nproc: int) -> int:
    """Intra-op threads per worker when OMP_NUM_THREADS is not set (as torchrun: cores / workers)."""
    return max(1, (os.cpu_count() or 1) // nproc)


def threads_per_worker(nproc: int, environ: Mapping[str, str]) -> int:
    """The threads each worker will start: OMP_NUM_THREADS if it is a positive int, else the default."""
    text = environ.get("OMP_NUM_THREADS", "")
    return int(text) if text.isdigit() and int(text) > 0 else default_threads(nproc)


def plan_binding(mode: str, nproc: int, environ: Mapping[str, str], cpus: Optional[Sequence[int]] = None) -> Optional[list[int]]:
    """The CPUs to share out among ``nproc`` workers, or None to leave them unbound."""
    if mode not in MODES:
        raise ValueError(f"cpu_bind={mode!r} must be one of {', '.join(MODES)}.")
    cpus = list(usable_cpus() if cpus is None else cpus)
    if mode == "none" or len(cpus) < nproc:
        return None
    if nproc * threads_per_worker(nproc, environ) < len(cpus):  # part of a shared machine: let the OS place it
        return None
    return cpus


def worker_slice(cpus: Sequence[int], local_rank: int, local_world_size: int) -> list[int]:
    """Local rank ``local_rank``'s share: the r-th contiguous block of len(cpus) // workers CPUs."""
    width = len(cpus) // local_world_size
    if width < 1:
        return list(cpus)
    return list(cpus[local_rank * width : (local_rank + 1) * width])


def bind_worker(cpus: Sequence[int], local_rank: int, local_world_size: int) -> None:
    """Restrict this process (and what it starts later) to its share of ``cpus``; a no-op off Linux."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(worker_slice(cpus, local_rank, local_world_size)))


def format_cpus(cpus: Sequence[int]) -> str:
    """``[0, 1, 2]`` -> ``"0,1,2"`` (the worker's --bind-cpus argument)."""
    return ",".join(str(c) for c in cpus)


def parse_cpus(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``."""
    return [int(c) for c in text.split(",") if c]
