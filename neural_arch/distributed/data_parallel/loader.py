"""A torch ``DataLoader`` over our ``DistributedSampler``, each batch with its global batch size.

Use, in a plain script under any launcher (``python -m neural_arch.distributed.launcher``)::

    sampler = nd.DistributedSampler(dataset, batch_size=64)        # 64 = the global batch
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=2)
    for (x, y), global_size in nd.with_global_size(loader):
        nd.global_batch_loss(loss_fn(model(x), y), global_size).backward()

Why: the sampler yields ``IndexBatch`` objects that carry ``global_size`` (the whole global
batch, summed over ranks: what exact loss weighting needs), but a DataLoader collates the samples
and the size is lost. It needs no collective: global batch k of an epoch is ``order[kB:(k+1)B]``
on every rank, so the sizes follow from the sampler's position alone. They are read when the
iteration starts, before the loader's workers move the sampler, and paired with the batches in
order (a loader with ``in_order=False`` is refused).
"""

from __future__ import annotations

from typing import Any, Iterator

from torch.utils.data import DataLoader

from neural_arch.distributed.data_parallel.sampler import DistributedSampler


def with_global_size(loader: DataLoader) -> Iterator[tuple[Any, int]]:
    """Each batch of ``loader`` (one epoch) with the size of the global batch it is a share of."""
    sampler = loader.batch_sampler
    if not isinstance(sampler, DistributedSampler) or sampler.batch_size is None:
        raise ValueError(
            f"with_global_size: the loader's batch_sampler is {type(sampler).__name__}, not a DistributedSampler "
            "with batch_size=; build it as DataLoader(dataset, batch_sampler=DistributedSampler(dataset, batch_size=B))"
        )
    if getattr(loader, "in_order", True) is False:
        raise ValueError(
            "with_global_size: the loader has in_order=False, so batches and sizes would not pair up; "
            "leave in_order at its default (True)"
        )
    sizes = sampler.global_batch_sizes()  # now: the loader's iterator moves the sampler as it prefetches
    return zip(loader, sizes, strict=True)
