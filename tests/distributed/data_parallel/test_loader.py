"""``with_global_size``: a torch DataLoader over our sampler, each batch with its global batch size.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_loader.py -q -p no:cacheprovider``
No process group: each rank's sampler is given its rank. The sizes must be those of the
sampler's own ``IndexBatch.global_size`` (with and without loader workers, from the start and
restored mid-epoch); the plain script under the launcher is in tests/distributed/launcher/test_cpu_bind.py.
"""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import neural_arch.distributed as nd

DATA = TensorDataset(torch.arange(23.0))


def sampler(rank: int, position: int = 0) -> nd.DistributedSampler:
    s = nd.DistributedSampler(DATA, batch_size=5, seed=4, rank=rank, num_replicas=3)
    s.load_state_dict({**s.state_dict(), "epoch": 1, "position": position})
    return s


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("position", [0, 10])
def test_each_batch_comes_with_the_size_of_its_global_batch(workers, position):
    for rank in range(3):
        want = [(batch, batch.global_size) for batch in sampler(rank, position)]
        loader = DataLoader(DATA, batch_sampler=sampler(rank, position), num_workers=workers)
        got = [([int(v) for v in x], size) for (x,), size in nd.with_global_size(loader)]
        assert got == [(list(ids), size) for ids, size in want]
    assert [size for _, size in want] == ([5, 5, 3] if position else [5, 5, 5, 5, 3])


def test_a_loader_without_our_batch_sampler_is_one_line():
    with pytest.raises(ValueError, match="batch_sampler is BatchSampler, not a DistributedSampler"):
        nd.with_global_size(DataLoader(DATA, batch_size=4))
    with pytest.raises(ValueError, match="needs batch_size="):
        nd.DistributedSampler(DATA, rank=0, num_replicas=1).global_batch_sizes()
