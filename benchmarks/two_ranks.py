"""Run a benchmark body on 2 spawned gloo ranks (127.0.0.1, a free port, 1 thread each).

Used by ddp_overhead.py and trainer_overhead.py: ``result = on_two_ranks(body, args)``
calls ``body(rank, args)`` in both processes with the process group initialised and
returns rank 0's result.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch
import torch.multiprocessing as mp

from neural_arch.distributed import destroy_process_group, init_process_group
from neural_arch.utils.ports import free_port


def _child(body: Callable[[int, Any], Any], rank: int, port: int, args: Any, out: "mp.Queue") -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    init_process_group(backend="gloo")
    result = body(rank, args)
    if rank == 0:
        out.put(result)
    destroy_process_group()


def on_two_ranks(body: Callable[[int, Any], Any], args: Any, timeout: float = 3600) -> Any:
    """``body(rank, args)`` on 2 ranks; rank 0's return value."""
    port = free_port()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(body, r, port, args, out)) for r in range(2)]
    for p in procs:
        p.start()
    result = out.get(timeout=timeout)
    for p in procs:
        p.join()
    return result
