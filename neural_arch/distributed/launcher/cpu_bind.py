"""Give each local worker its own CPU cores (``--cpu-bind auto``, the default; ``none`` to leave placement to the OS).

Run: ``python -m neural_arch.distributed.launcher --nproc_per_node=2 --cpu-bind none script.py`` to
turn it off; a worker sees its cores with ``os.sched_getaffinity(0)``.

Why: two single-threaded DDP ranks of the sea-ice U-Net on two cores step about a quarter
faster when each is pinned to one core than when the OS places them (benchmarks/sea_ice_scaling/
has the measurement): unpinned, the ranks' gloo,
heartbeat and prefetch threads wake on the busy cores and the main threads migrate, losing
their caches. ``srun --cpu-bind`` and ``mpirun --bind-to core`` bind for this reason; torchrun
does not bind CPU workers.

When ``auto`` binds: the job's workers times their threads (OMP_NUM_THREADS, or the
launcher's default of cores / workers) fill every CPU this launcher may use (its affinity
mask, e.g. a SLURM allocation), and there are at least as many CPUs as workers. A job that
uses only part of a shared machine is not bound: two such jobs would otherwise both pin to
the first cores. Local rank r gets the r-th contiguous slice of len(cpus) // workers CPUs,
counted with a core's hyperthreads next to each other (so a slice is whole cores).

DataLoader workers: a rank's loader workers are forked from it and share its slice, and torch
warns ("suggested max number of worker ... is 1") when a rank starts more workers than it has
CPUs. A rank is bound only when its slice holds its loader workers: ``--loader-workers N`` (the
trainer passes ``training.data_workers``) needs N CPUs a rank; a plain script's count is
unknown to the launcher, so a rank is then bound to a set of at least two CPUs, never one (a
job whose slices would be one CPU runs unbound, as under torchrun). ``--loader-workers 0``
says the script starts none: one-core slices again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence

MODES = ("auto", "none")
SYSFS_CPUS = Path("/sys/devices/system/cpu")


def usable_cpus(topology: Path = SYSFS_CPUS) -> list[int]:
    """The CPUs this process may run on (its affinity mask), hyperthreads of one core next to
    each other (Linux numbers them N apart), so that a contiguous block holds whole cores."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return by_core(cpus, topology)


def by_core(cpus: Sequence[int], topology: Path = SYSFS_CPUS) -> list[int]:
    """``cpus`` ordered by (socket, core), a core's hyperthreads together."""
    return sorted(cpus, key=lambda cpu: _core_of(cpu, topology))


def _core_of(cpu: int, topology: Path) -> tuple[int, int, int]:
    """(socket, core, cpu) from sysfs; (0, cpu, cpu) where it cannot be read."""
    where = topology / f"cpu{cpu}" / "topology"
    try:
        return int((where / "physical_package_id").read_text()), int((where / "core_id").read_text()), cpu
    except (OSError, ValueError):
        return 0, cpu, cpu


def default_threads(nproc: int) -> int:
    """Intra-op threads per worker when OMP_NUM_THREADS is not set (as torchrun: cores / workers)."""
    return max(1, (os.cpu_count() or 1) // nproc)


def threads_per_worker(nproc: int, environ: Mapping[str, str]) -> int:
    """The threads each worker will start: OMP_NUM_THREADS if it is a positive int, else the default."""
    text = environ.get("OMP_NUM_THREADS", "")
    return int(text) if text.isdigit() and int(text) > 0 else default_threads(nproc)


UNKNOWN_LOADER_CPUS = 2
"""CPUs a rank's slice needs when its DataLoader workers are unknown (a plain script): a set, not one core."""


def plan_binding(
    mode: str,
    nproc: int,
    environ: Mapping[str, str],
    cpus: Optional[Sequence[int]] = None,
    loader_workers: Optional[int] = 0,
) -> Optional[list[int]]:
    """The CPUs to share out among ``nproc`` workers, or None to leave them unbound.

    ``loader_workers``: DataLoader worker processes each rank starts (None: unknown); a rank
    is bound only to a slice with at least that many CPUs (unknown: ``UNKNOWN_LOADER_CPUS``)."""
    if mode not in MODES:
        raise ValueError(f"cpu_bind={mode!r} must be one of {', '.join(MODES)}.")
    cpus = list(usable_cpus() if cpus is None else cpus)
    if mode == "none" or len(cpus) < nproc:
        return None
    if nproc * threads_per_worker(nproc, environ) < len(cpus):  # part of a shared machine: let the OS place it
        return None
    needed = UNKNOWN_LOADER_CPUS if loader_workers is None else max(1, loader_workers)
    if len(cpus) // nproc < needed:  # the loader workers would crowd one core: the OS places them all
        return None
    return cpus


def worker_slice(cpus: Sequence[int], local_rank: int, local_world_size: int) -> list[int]:
    """Local rank ``local_rank``'s share: the r-th contiguous block of len(cpus) // workers CPUs."""
    width = len(cpus) // local_world_size
    if width < 1:
        return list(cpus)
    return list(cpus[local_rank * width : (local_rank + 1) * width])


def bind_worker(cpus: Sequence[int], local_rank: int, local_world_size: int) -> None:
    """Restrict this process (and what it starts later) to its share of ``cpus``; a no-op off
    Linux. A refused binding (a CPU gone offline since the plan) is a note, not a failure."""
    if not hasattr(os, "sched_setaffinity"):
        return
    mine = worker_slice(cpus, local_rank, local_world_size)
    try:
        os.sched_setaffinity(0, set(mine))
    except OSError as exc:
        print(
            f"launcher: note: local rank {local_rank} runs unbound (binding to CPUs {format_cpus(mine)} failed: "
            f"{exc}); pass --cpu-bind none to skip binding",
            file=sys.stderr,
            flush=True,
        )


def format_cpus(cpus: Sequence[int]) -> str:
    """``[0, 1, 2]`` -> ``"0,1,2"`` (the worker's --bind-cpus argument)."""
    return ",".join(str(c) for c in cpus)


def parse_cpus(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``."""
    return [int(c) for c in text.split(",") if c]
