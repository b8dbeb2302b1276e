"""Data parallelism that is exact: N ranks compute what one process would on the same global batch.

Use: ``model = DistributedDataParallel(net)``; ``sampler = DistributedSampler(dataset,
batch_size=64)``; for each ``batch`` of the sampler,
``global_batch_loss(per_sample_losses, batch.global_size).backward()``; normalise inputs
with ``global_mean_std(x)``.

Concern: what makes data-parallel training equal to one process: gradient averaging with
working ``no_sync`` (``ddp.py``), a world-size-invariant, resumable sample order
(``sampler.py``), loss weighting by global sample count so uneven or empty shares stay
exact (``weighting.py``), and numerically stable merged statistics (``stats.py``).
"""

from neural_arch.distributed.data_parallel.ddp import (
    DistributedDataParallel,
    UnusedParametersError,
    average_gradients,
    no_sync,
)
from neural_arch.distributed.data_parallel.loader import with_global_size
from neural_arch.distributed.data_parallel.sampler import DistributedSampler, IndexBatch
from neural_arch.distributed.data_parallel.stats import global_mean_std, local_moments, merge_moments
from neural_arch.distributed.data_parallel.weighting import global_batch_loss, global_count, zero_loss

__all__ = [
    "DistributedDataParallel",
    "DistributedSampler",
    "IndexBatch",
    "UnusedParametersError",
    "average_gradients",
    "global_batch_loss",
    "global_count",
    "global_mean_std",
    "local_moments",
    "merge_moments",
    "no_sync",
    "with_global_size",
    "zero_loss",
]
