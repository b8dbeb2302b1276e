"""The public distributed API: ``from neural_arch.distributed import ...``.

Run a script on 2 processes: ``python -m neural_arch.distributed.launcher --nproc_per_node=2
script.py`` (or ``torchrun``); every function here also works under plain ``python`` (world
size 1, collectives are identities).

Subpackages, one concern each: ``env`` (where am I running?), ``runtime`` (process group,
collectives, heartbeat), ``data_parallel`` (exact DDP, sampler, loss weighting, stats),
``checkpoint`` (atomic save/load, sharded), ``launcher`` (start and restart the workers).
"""

from neural_arch.distributed.checkpoint import (
    CheckpointError,
    CheckpointInfo,
    load_checkpoint,
    load_sharded,
    save_checkpoint,
    save_sharded,
)
from neural_arch.distributed.data_parallel import (
    DistributedDataParallel,
    DistributedSampler,
    IndexBatch,
    UnusedParametersError,
    global_batch_loss,
    global_count,
    global_mean_std,
    no_sync,
    with_global_size,
    zero_loss,
)
from neural_arch.distributed.env import ClusterEnv, detect_cluster_env
from neural_arch.distributed.launcher import DistributedLauncher, LaunchConfig, launch_distributed_training
from neural_arch.distributed.runtime import (
    CollectiveFailed,
    MissingProcessGroupError,
    ReduceOp,
    all_gather,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    destroy_process_group,
    get_backend,
    get_distributed_info,
    get_local_rank,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
    reduce_scatter,
)

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "load_checkpoint",
    "load_sharded",
    "save_checkpoint",
    "save_sharded",
    "ClusterEnv",
    "CollectiveFailed",
    "DistributedDataParallel",
    "DistributedLauncher",
    "LaunchConfig",
    "MissingProcessGroupError",
    "DistributedSampler",
    "IndexBatch",
    "ReduceOp",
    "UnusedParametersError",
    "all_gather",
    "all_gather_object",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy_process_group",
    "detect_cluster_env",
    "get_backend",
    "get_distributed_info",
    "get_local_rank",
    "get_rank",
    "get_world_size",
    "global_batch_loss",
    "global_count",
    "global_mean_std",
    "init_process_group",
    "is_initialized",
    "launch_distributed_training",
    "no_sync",
    "reduce_scatter",
    "with_global_size",
    "zero_loss",
]
