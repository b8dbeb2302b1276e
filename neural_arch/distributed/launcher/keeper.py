"""The node's snapshot keeper, started by the launcher for the whole job: workers' memory snapshots survive them.

Use (``launch.py`` does, around the agent's run)::

    with node_keeper() as address:                          # a SnapshotKeeper thread on 127.0.0.1
        agent = RobustElasticAgent(..., keeper=address)     # leaves the keeper file in each worker's folder

Why in the launcher: a failure restarts every worker of the node (torch elastic), so a copy held in
a worker dies with it; the launcher process, where torch elastic's agent runs, lives on while its
workers are killed and restarted, so the keeper it holds (``checkpoint/memory_keeper.py``) still has
the newest snapshot when the restarted workers ask for it (``training/memory_snapshot.py``).
A node's loss takes its keeper with it; on several nodes each keeper also holds a copy of the
previous node's parts (``training/snapshot_ring.py``), so one lost node loses no part; where
more are lost, disk checkpoints stay the fallback.

How the workers find it: the agent writes ``neural_arch.keeper`` (0600: host, port, token;
``checkpoint/keeper_file.py``) into the folder torch elastic makes for each worker of each attempt
(that of its ``TORCHELASTIC_ERROR_FILE``), as torch makes the folder and before the worker
starts. No environment variable carries it; a worker of torchrun's finds no file, takes no
snapshots. Authentication: a random token made here for the keeper alone, never the job's token
(docs/security.md: the job token is stored nowhere, and the keeper file is a file). On several
nodes the workers tell each other their keepers' addresses and tokens (one gather over their
process group, ``training/snapshot_ring.py``): the job's workers, and only they, learn them.

Bounded memory: the keeper holds at most ``capacity`` bytes (the newest complete step plus one
arriving): ``KEEPER_SHARE`` of the host memory free to this launcher when the job starts
(``MemAvailable`` and the memory cgroup's room, as ``StagingRoom`` reads them), or
``FALLBACK_CAPACITY`` where the kernel says nothing. A snapshot that does not fit is refused in one
line and training goes on. The keeper takes memory only as snapshots arrive.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from neural_arch.distributed.checkpoint.keeper_file import write_keeper_file
from neural_arch.distributed.checkpoint.keeper_protocol import KeeperAddress
from neural_arch.distributed.checkpoint.memory_keeper import SnapshotKeeper
from neural_arch.distributed.checkpoint.staging_room import StagingRoom
from neural_arch.distributed.launcher.job_token import JobToken

KEEPER_SHARE = 0.25
"""Share of the host memory free at the job's start that the keeper may hold: the workers'
training needs the rest (on a CPU the snapshots share its memory)."""
FALLBACK_CAPACITY = 1 << 30
"""Bytes the keeper may hold where the kernel exposes no limit (no /proc/meminfo, no cgroup)."""


def keeper_capacity(room: Optional[StagingRoom] = None) -> int:
    """The keeper's byte cap: ``KEEPER_SHARE`` of the host room now, or ``FALLBACK_CAPACITY``."""
    free = (room or StagingRoom()).host_room(held_through_training=False)
    return FALLBACK_CAPACITY if free is None else max(int(free * KEEPER_SHARE), 0)


@contextlib.contextmanager
def node_keeper(capacity: Optional[int] = None, reach: Optional[str] = None) -> Iterator[KeeperAddress]:
    """A keeper for this node's workers while the block runs; its address. ``reach`` (a multi-node
    job: this node's address) lets the other nodes' workers reach it too, else it listens on loopback."""
    token = JobToken(secrets.token_hex(16), "the launcher's snapshot keeper")  # its own: see the docstring
    capacity = keeper_capacity() if capacity is None else capacity
    try:
        keeper = SnapshotKeeper(token, capacity, reach=reach)
    except OSError as exc:  # e.g. an FQDN that is not this machine's: this node's workers only
        print(
            f"launcher: note: the snapshot keeper cannot listen on {reach} ({exc.strerror or exc}): it serves "
            "this node's workers only and keeps no copy of another node's snapshots; pass --local-addr naming "
            "this machine",
            file=sys.stderr,
            flush=True,
        )
        keeper = SnapshotKeeper(token, capacity)
    with keeper:
        yield keeper.address


def leaving_keeper_files(reify: Callable[..., Any], address: KeeperAddress) -> Callable[..., Any]:
    """torch elastic's ``LogsSpecs.reify`` that also writes the keeper file into every worker's
    folder it made (the folder of its error file), before any worker of the attempt starts."""

    def reified(envs: Any) -> Any:
        logs = reify(envs)
        for error_file in logs.error_files.values():
            if error_file and error_file != os.devnull:  # devnull: torch keeps no files, nowhere to leave it
                write_keeper_file(Path(error_file).parent, address)
        return logs

    return reified
