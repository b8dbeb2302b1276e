"""The public distributed API: ``from neural_arch.distributed import ...``.

Run a script on 2 processes: ``torchrun --nproc_per_node=2 script.py``; every function here
also works under plain ``python`` (world size 1, collectives are identities).
"""

from neural_arch.distributed.collectives import (
    ReduceOp,
    all_gather,
    all_gather_object,
    all_reduce,
    broadcast,
    reduce_scatter,
)
from neural_arch.distributed.ddp import DistributedDataParallel, UnusedParametersError, no_sync
from neural_arch.distributed.env import ClusterEnv, detect_cluster_env
from neural_arch.distributed.process_group import (
    barrier,
    destroy_process_group,
    get_backend,
    get_distributed_info,
    get_local_rank,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
)
from neural_arch.distributed.sampler import DistributedSampler, IndexBatch
from neural_arch.distributed.stats import global_mean_std
from neural_arch.distributed.weighting import global_batch_loss, global_count, zero_loss

__all__ = [
    "ClusterEnv",
    "DistributedDataParallel",
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
    "no_sync",
    "reduce_scatter",
    "zero_loss",
]
