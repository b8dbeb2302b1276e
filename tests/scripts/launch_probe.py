"""A worker script for launcher tests: ``probe.py OUT_DIR MODE``.

Every rank joins the group, all-reduces its rank, and writes what it saw to
OUT_DIR/rank_<RANK>_attempt_<TORCHELASTIC_RESTART_COUNT>.json. MODE adds a fault:
``kill1`` (rank 1 SIGKILLs itself on the first attempt), ``hang1`` (rank 1 sleeps forever
before the collective), ``stop1`` (rank 1 SIGSTOPs itself), ``fail1`` (rank 1 raises on every attempt),
``torn1`` (rank 1 leaves a cut-off elastic error file and exits 1 on the first attempt, as if
SIGTERMed mid-write), ``keyerror1`` (rank 1 raises KeyError in ``lookup`` on every attempt), ``ok``.
"""

import json
import os
import signal
import sys
import time

import torch

from neural_arch.distributed import (
    all_reduce,
    destroy_process_group,
    detect_cluster_env,
    get_rank,
    get_world_size,
    init_process_group,
)


def lookup(table, key):
    return table[key]  # keyerror1: the user's line the failure summary names


out_dir, mode = sys.argv[1], sys.argv[2]
init_process_group()
rank, world = get_rank(), get_world_size()
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
print(f"hello from rank {rank} of {world}, attempt {attempt}", flush=True)
if mode == "kill1" and rank == 1 and attempt == "0":
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "hang1" and rank == 1:
    time.sleep(10_000)
if mode == "stop1" and rank == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
if mode == "torn1" and rank == 1 and attempt == "0":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        f.write('{"message": {"message": "RuntimeError: cut o')
    os._exit(1)
if mode == "keyerror1" and rank == 1:
    lookup({"lr": 0.1}, "learning_rate")
if mode == "fail1" and rank == 1:
    raise RuntimeError("rank 1 cannot continue: simulated bug")
total = all_reduce(torch.tensor([float(rank)])).item()
for _ in range(3):
    all_reduce(torch.ones(4))
keys = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
]
record = {
    "source": detect_cluster_env().source,
    "rank": rank,
    "world": world,
    "sum": total,
    "env": {k: os.environ.get(k) for k in keys},
    "argv": sys.argv[3:],
}
with open(os.path.join(out_dir, f"rank_{rank}_attempt_{attempt}.json"), "w") as f:
    json.dump(record, f)
destroy_process_group()
