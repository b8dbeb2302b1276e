"""Run a benchmark body on spawned gloo ranks (127.0.0.1, a free port, 1 thread each).

Ranks are bound to CPUs as our launcher binds them (``--cpu-bind auto``: here 2 ranks get a
core each, 4 ranks on 2 cores stay unbound); ``cpu_bind="none"`` leaves them to the OS.

Used by ddp_overhead.py, trainer_overhead.py (2 ranks) and memory.py, pipeline.py (1, 2
or 4 ranks): ``result = on_two_ranks(body, args)`` or ``on_ranks(body, args, world=4)``
calls ``body(rank, args)`` in every process with the process group initialised and
returns rank 0's result.
"""

from __future__ import annotations

import os
import queue
import time
from typing import Any, Callable, Optional

import torch
import torch.multiprocessing as mp

from neural_arch.distributed import destroy_process_group, init_process_group
from neural_arch.distributed.launcher.cpu_bind import bind_worker, plan_binding
from neural_arch.utils.ports import free_port


def _child(
    body: Callable[[int, Any], Any],
    rank: int,
    world: int,
    port: int,
    args: Any,
    out: mp.Queue,
    cpus: Optional[list[int]] = None,
) -> None:
    if cpus is not None:
        bind_worker(cpus, rank, world)
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    init_process_group(backend="gloo")
    result = body(rank, args)
    if rank == 0:
        out.put(result)
    destroy_process_group()


def on_ranks(
    body: Callable[[int, Any], Any], args: Any, world: int, timeout: float = 3600, cpu_bind: str = "auto"
) -> Any:
    """``body(rank, args)`` on ``world`` ranks; rank 0's return value."""
    cpus = plan_binding(cpu_bind, world, {"OMP_NUM_THREADS": "1"})
    port = free_port()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(body, r, world, port, args, out, cpus)) for r in range(world)]
    for p in procs:
        p.start()
    result = _rank0_result(out, procs, timeout)
    for p in procs:
        p.join()
    return result


def _rank0_result(out: mp.Queue, procs: list, timeout: float) -> Any:
    """Rank 0's result, or a clear error as soon as a rank died without one (a crashed
    rank would otherwise leave the others, and this wait, hanging until ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=1.0)
        except queue.Empty:
            dead = [(rank, p.exitcode) for rank, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if dead:
                for p in procs:
                    p.kill()
                raise RuntimeError(
                    f"benchmark rank(s) died: {dead} (rank, exit code); their traceback is above"
                ) from None
    raise TimeoutError(f"no result from rank 0 within {timeout:.0f} s")


def on_two_ranks(body: Callable[[int, Any], Any], args: Any, timeout: float = 3600, cpu_bind: str = "auto") -> Any:
    """``body(rank, args)`` on 2 ranks; rank 0's return value."""
    return on_ranks(body, args, 2, timeout, cpu_bind)


def load_average() -> str:
    """The machine's load averages, for saying under what load a benchmark ran (2 cores here)."""
    one, five, fifteen = os.getloadavg()
    return f"load average (1/5/15 min): {one:.2f} {five:.2f} {fifteen:.2f}"
