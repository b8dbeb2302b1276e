"""The public distributed API: ``from neural_arch.distributed import ...``.

Run a script on 2 processes: ``python -m neural_arch.distributed.launcher --nproc_per_node=2
script.py`` (or ``torchrun``); every function here also works under plain ``python`` (world
size 1, collectives are identities).

Subpackages, one concern each: ``env`` (where am I running?), ``runtime`` (process group,
collectives, heartbeat), ``data_parallel`` (exact DDP, sampler, loss weighting, stats),
``checkpoint`` (atomic save/load, sharded), ``launcher`` (start and restart the workers).

Every name is imported on first use (PEP 562 ``__getattr__``): importing a light submodule
(``neural_arch.distributed.launcher.args`` for ``neural-arch launch --help``, ``env`` for a
scheduler's variables) then does not load torch, seconds on a busy machine. The imports under
``TYPE_CHECKING`` give type checkers the same names, with their real types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neural_arch.utils.lazy_exports import lazy_getattr

if TYPE_CHECKING:
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

_WHERE = {
    **dict.fromkeys(
        ("CheckpointError", "CheckpointInfo", "load_checkpoint", "load_sharded", "save_checkpoint", "save_sharded"),
        "checkpoint",
    ),
    **dict.fromkeys(
        (
            "DistributedDataParallel",
            "DistributedSampler",
            "IndexBatch",
            "UnusedParametersError",
            "global_batch_loss",
            "global_count",
            "global_mean_std",
            "no_sync",
            "with_global_size",
            "zero_loss",
        ),
        "data_parallel",
    ),
    **dict.fromkeys(("ClusterEnv", "detect_cluster_env"), "env"),
    **dict.fromkeys(("DistributedLauncher", "LaunchConfig", "launch_distributed_training"), "launcher"),
    **dict.fromkeys(
        (
            "CollectiveFailed",
            "MissingProcessGroupError",
            "ReduceOp",
            "all_gather",
            "all_gather_object",
            "all_reduce",
            "barrier",
            "broadcast",
            "destroy_process_group",
            "get_backend",
            "get_distributed_info",
            "get_local_rank",
            "get_rank",
            "get_world_size",
            "init_process_group",
            "is_initialized",
            "reduce_scatter",
        ),
        "runtime",
    ),
}
"""Public name -> the subpackage that defines it."""

SUBPACKAGES = frozenset(("checkpoint", "data_parallel", "env", "launcher", "parallel", "runtime"))
"""Reachable as attributes (``neural_arch.distributed.runtime``), as when this file imported them all."""


__getattr__ = lazy_getattr(__name__, _WHERE, globals(), SUBPACKAGES)


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, *SUBPACKAGES})


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
