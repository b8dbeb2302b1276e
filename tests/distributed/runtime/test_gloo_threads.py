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


def settled_policies() -> tuple[int, list[int]]:
    """Set every gloo I/O thread that exists now, then read their policies.

    Called after a collective on every group, when no group is being made: gloo starts a
    group's I/O thread before the thread names itself, so a count taken while a group is
    still being set up may miss it (seen as 3 then 4 threads on one machine). Once a
    collective on the group has completed, its thread has run and carries its name.
    """
    return batch_gloo_io_threads(), policies()


def worker(rank: int, world_size: int) -> dict:
    init_process_group(backend="gloo")
    total = all_reduce(torch.arange(4, dtype=torch.float64) * (rank + 1))
    after_init = settled_policies()
    mesh = build_mesh(ParallelLayout(dp_shard=2))
    torch.distributed.all_reduce(t := torch.full((3,), float(rank + 1)), group=mesh["dp_shard"].get_group())
    after_mesh = settled_policies()
    return {"init": after_init, "mesh": after_mesh, "sum": total.tolist(), "group_sum": t.tolist()}


def test_every_gloo_io_thread_is_batch_after_init_and_after_a_mesh():
    for rank, got in enumerate(run_ranks(worker, 2)):
        for when in ("init", "mesh"):
            count, found = got[when]
            # Every named I/O thread is SCHED_BATCH, and the call counts exactly those (idempotent:
            # threads set by init_process_group or build_mesh count as set).
            assert found and set(found) == {os.SCHED_BATCH}, (rank, when, found)
            assert count == len(found), (rank, when, count, found)
        assert len(got["mesh"][1]) > len(got["init"][1]), (rank, got)  # the mesh's groups brought their own
        assert got["sum"] == [0.0, 3.0, 6.0, 9.0] and got["group_sum"] == [3.0, 3.0, 3.0]
