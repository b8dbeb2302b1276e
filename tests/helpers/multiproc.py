"""Run a function on N real ranks (spawned processes, gloo on 127.0.0.1, free port).

Use: ``results = run_ranks(worker, world_size=3, args=(...), timeout=60)``. ``worker`` is a
module-level function ``worker(rank, world_size, *args)``; it runs in a process forked from a
fork server that has torch imported (fresh: not a fork of the test process), with
RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set as a launcher would, typically
calls ``init_process_group()`` itself, and returns something picklable. A rank that raises
makes ``run_ranks`` raise ``RankFailed`` with that rank's traceback; ranks still running at
``timeout`` are killed and reported by number, so a hang fails the test instead of CI.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from typing import Any, Callable, Sequence

from neural_arch.utils.ports import free_port

__all__ = ["RankFailed", "free_port", "run_ranks"]


class RankFailed(AssertionError):
    """A rank raised, died, or did not finish in time."""


def _child(fn: Callable[..., Any], rank: int, world_size: int, port: int, args: Sequence[Any], results: Any) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    import torch

    torch.set_num_threads(1)
    import torch.distributed as dist

    from neural_arch.distributed import destroy_process_group

    try:
        value = fn(rank, world_size, *args)
        destroy_process_group()  # waits for slower peers before tearing down
        results.put((rank, True, value))
    except BaseException:  # noqa: BLE001 - report anything to the parent
        results.put((rank, False, traceback.format_exc()))
        if dist.is_initialized():
            dist.destroy_process_group()


PRELOAD = ["torch", "torch.distributed", "neural_arch.distributed"]
"""Imported once by the fork server: each rank then starts in a fraction of a second instead of
importing torch again (3-4 s for two ranks on two busy cores, a few minutes over the suite)."""


def _context() -> Any:
    """A fork server that has torch imported: ranks are forks of a process that has started no
    thread (fork-safe, unlike forking the test process), with the test's sys.path and main module
    prepared as for spawn. The server keeps the environment and directory it started with; a rank
    sets its own variables in ``_child``."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def run_ranks(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (), timeout: float = 90.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes; results in rank order."""
    ctx = _context()
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_child, args=(fn, r, world_size, port, tuple(args), results), daemon=True)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    got: dict[int, Any] = {}
    errors: dict[int, str] = {}
    try:
        while len(got) + len(errors) < world_size:
            try:
                rank, ok, value = results.get(timeout=0.2)
                (got if ok else errors)[rank] = value
                continue
            except queue.Empty:
                pass
            dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in got and r not in errors]
            for r in dead:
                errors[r] = f"process exited with code {procs[r].exitcode} before reporting"
            if time.monotonic() > deadline:
                missing = [r for r in range(world_size) if r not in got and r not in errors]
                raise RankFailed(f"ranks {missing} did not finish within {timeout:.0f} s (hang?)")
    finally:
        if len(got) == world_size:
            for p in procs:
                p.join(timeout=10)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        first = min(errors)
        raise RankFailed(f"rank {first} failed:\n{errors[first]}")
    return [got[r] for r in range(world_size)]
