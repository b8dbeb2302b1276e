"""The in-rank runtime: join the job's process group, talk to the other ranks, and name a
rank that stopped answering.

Use: ``from neural_arch.distributed.runtime import init_process_group, all_reduce``;
``init_process_group()`` then ``all_reduce(np.ones(3))`` under any launcher, or under plain
``python`` (world size 1: every collective is the identity).

Concern: the process group's lifetime (``process_group.py``, the only module that creates
one), out-of-place collectives on torch tensors and numpy arrays (``collectives.py``), and
the heartbeat that turns a collective timeout into "rank N did not arrive" (``heartbeat.py``),
the count of the script's own collective calls that those names use (``calls.py``), the
check that names ranks which entered different collectives before the timeout (``desync/``),
and the guard that refuses to run one rank of a multi-rank job alone (``guard.py``).
"""

from neural_arch.distributed.runtime.calls import CollectiveFailed
from neural_arch.distributed.runtime.collectives import (
    ReduceOp,
    all_gather,
    all_gather_object,
    all_reduce,
    broadcast,
    reduce_scatter,
)
from neural_arch.distributed.runtime.desync import CollectiveDesync
from neural_arch.distributed.runtime.guard import MissingProcessGroupError, require_process_group
from neural_arch.distributed.runtime.heartbeat import describe_stragglers
from neural_arch.distributed.runtime.process_group import (
    abandon_process_group,
    barrier,
    default_backend,
    destroy_process_group,
    get_backend,
    get_distributed_info,
    get_local_rank,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
    resolve_backend,
)

__all__ = [
    "CollectiveDesync",
    "CollectiveFailed",
    "MissingProcessGroupError",
    "ReduceOp",
    "abandon_process_group",
    "all_gather",
    "all_gather_object",
    "all_reduce",
    "barrier",
    "broadcast",
    "default_backend",
    "describe_stragglers",
    "destroy_process_group",
    "get_backend",
    "get_distributed_info",
    "get_local_rank",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_initialized",
    "reduce_scatter",
    "require_process_group",
    "resolve_backend",
]
