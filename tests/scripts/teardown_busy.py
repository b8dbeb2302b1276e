"""Rank 0 keeps computing while the other ranks finish and leave.

Run: ``RANK=.. WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=.. python teardown_busy.py [explicit|atexit]``.
With torch 2.13 + gloo, ranks that exit while rank 0 is busy can abort with
"terminate called without an active exception"; neural_arch's teardown must prevent it,
both with an explicit destroy_process_group() and when the script never calls it.
"""

import sys
import time

import torch

from neural_arch.distributed import all_reduce, destroy_process_group, get_rank, init_process_group

init_process_group(backend="gloo")
all_reduce(torch.ones(1000))
rank = get_rank()
if rank == 0:
    x = torch.randn(300, 300)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        x = x @ x.T
        x = x / x.norm()
if sys.argv[1:] == ["explicit"]:
    destroy_process_group()
print(f"rank {rank} done", flush=True)
