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
from neural_arch.distributed.checkpoint import (
    CheckpointError,
    CheckpointInfo,
    load_checkpoint,
    load_sharded,
    save_checkpoint,
    save_sharded,
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
    "CheckpointError",
    "CheckpointInfo",
    "load_checkpoint",
    "load_sharded",
    "save_checkpoint",
    "save_sharded",
    "ClusterEnv",
    "DistributedDataParallel",
    "DistributedLauncher",
    "LaunchConfig",
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
    "zero_loss",
]

_LAZY = {"DistributedLauncher", "LaunchConfig", "launch_distributed_training"}


def __getattr__(name: str) -> object:
    # Why lazy: importing launcher.py here would make `python -m neural_arch.distributed.launcher`
    # execute a module that is already imported (runpy warns, and it runs twice).
    if name in _LAZY:
        from neural_arch.distributed import launcher

        return getattr(launcher, name)
    raise AttributeError(f"module 'neural_arch.distributed' has no attribute {name!r}")
