"""gloo's I/O threads run under SCHED_BATCH after the process group and after a device mesh.

Run: ``.venv/bin/python -m pytest tests/distributed/runtime/test_gloo_threads.py -q``
2 real ranks over gloo on 127.0.0.1. Why it matters (a 0.53 MB all-reduce at 3.5 ms instead
of 0.5 when gloo's I/O thread preempts its own worker): gloo_threads.py. What must hold: every
``gloo_tcp_loop`` thread of each rank is SCHED_BATCH, including the ones a mesh's new groups
start, and collectives still give the exact sum. Linux only (the policy lives in /proc).
"""

import os
import sys
import threading

import pytest
import torch

from neural_arch.distributed import all_reduce, init_process_group
from neural_arch.distributed.parallel.layout import ParallelLayout
from neural_arch.distributed.parallel.mesh import build_mesh
from neural_arch.distributed.runtime.gloo_threads import batch_gloo_io_threads, io_thread_ids
from tests.helpers.multiproc import run_ranks


def _batch_refused() -> str:
    """Why this machine cannot put a thread under SCHED_BATCH (a container may forbid it), or ''."""
    if not sys.platform.startswith("linux"):
        return "thread policies are read from /proc (Linux only)"
    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    try:
        os.sched_setscheduler(thread.native_id, os.SCHED_BATCH, os.sched_param(0))
        return ""
    except PermissionError as exc:
        return f"this machine refuses SCHED_BATCH: {exc}"
    finally:
        done.set()
        thread.join()


REFUSED = _batch_refused()
pytestmark = [pytest.mark.multiprocess, pytest.mark.skipif(bool(REFUSED), reason=REFUSED or "-")]


def policies() -> list[int]:
    return [os.sched_getscheduler(tid) for tid in io_thread_ids()]


def worker(rank: int, world_size: int) -> dict:
    init_process_group(backend="gloo")
    after_init = policies()
    mesh = build_mesh(ParallelLayout(dp_shard=2))
    after_mesh = policies()
    total = all_reduce(torch.arange(4, dtype=torch.float64) * (rank + 1))
    torch.distributed.all_reduce(t := torch.full((3,), float(rank + 1)), group=mesh["dp_shard"].get_group())
    return {"init": after_init, "mesh": after_mesh, "sum": total.tolist(), "group_sum": t.tolist(),
            "again": batch_gloo_io_threads()}


def test_every_gloo_io_thread_is_batch_after_init_and_after_a_mesh():
    for rank, got in enumerate(run_ranks(worker, 2)):
        assert got["init"] and set(got["init"]) == {os.SCHED_BATCH}, (rank, got["init"])
        assert len(got["mesh"]) > len(got["init"]) and set(got["mesh"]) == {os.SCHED_BATCH}, (rank, got["mesh"])
        assert got["again"] == len(got["mesh"])  # idempotent: counts the threads already set
        assert got["sum"] == [0.0, 3.0, 6.0, 9.0] and got["group_sum"] == [3.0, 3.0, 3.0]
