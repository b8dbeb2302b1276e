"""Heartbeat: who did not arrive at a collective, on real gloo ranks.

Run: ``.venv/bin/python -m pytest tests/distributed/runtime/test_heartbeat.py``
"""

import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import neural_arch.distributed as nd
from neural_arch.distributed.runtime import heartbeat
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess  # every test here spawns ranks or runs a launcher/scheduler


def _first_beat(rank: int, world_size: int, pid_file: str) -> bool:
    if rank == 1:
        Path(pid_file).write_text(str(os.getpid()))
    nd.init_process_group()
    if rank == 1:
        # Stopped the instant init returns, as a hung rank may be: it must already be on
        # record, or the diagnosis says "never reported" instead of "silent" (a CI flake once).
        os.kill(os.getpid(), signal.SIGSTOP)
        present = True
    else:
        time.sleep(1.5 * heartbeat.INTERVAL)
        present = dist.distributed_c10d._get_default_store().check([heartbeat._key(1)])
        os.kill(int(Path(pid_file).read_text()), signal.SIGCONT)
    nd.barrier()
    nd.destroy_process_group()
    return present


def test_first_beat_is_on_record_when_init_returns(tmp_path):
    for attempt in range(3):
        pid_file = str(tmp_path / f"pid_{attempt}")
        assert run_ranks(_first_beat, world_size=2, args=(pid_file,), timeout=60) == [True, True]


def _diagnose(rank: int, world_size: int) -> list:
    nd.init_process_group()
    seen = []
    if rank == 0:
        work = dist.all_reduce(torch.ones(1), async_op=True)  # issued; rank 1 is not there yet
        time.sleep(2.5 * heartbeat.INTERVAL)  # rank 1 beats with its older count meanwhile
        seen.append(heartbeat.describe_stragglers())
        dist.barrier()  # rank 1: stopped its heartbeat (its last record says "left")
        time.sleep(2.5)
        seen.append(heartbeat.describe_stragglers(stale_after=1.5))
        dist.barrier()
        work.wait()
    else:
        time.sleep(2.5 * heartbeat.INTERVAL + 1)
        dist.all_reduce(torch.ones(1))
        heartbeat.stop_heartbeat()
        dist.barrier()
        dist.barrier()
    nd.destroy_process_group()
    return seen


def test_behind_and_departed_ranks_are_named():  # a silent (SIGSTOPped) one: tests/distributed/launcher
    behind, silent = run_ranks(_diagnose, world_size=2, timeout=90)[0]
    assert behind is not None and "did not arrive: rank 1 (entered only" in behind
    assert silent is not None and "did not arrive: rank 1 (left the process group" in silent
