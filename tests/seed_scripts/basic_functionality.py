# Seed 004 "Basic Functionality Testing", verbatim.
#!/usr/bin/env python3
"""Test current distributed functionality."""

import numpy as np

from neural_arch.core.tensor import Tensor
from neural_arch.distributed import DistributedSampler, all_reduce, get_rank, get_world_size, init_process_group


def test_basic_functionality():
    """Test basic distributed features."""

    # Test process group initialization
    init_process_group(backend="gloo", world_size=1, rank=0)
    print(f"World size: {get_world_size()}, Rank: {get_rank()}")

    # Test communication primitives
    tensor = Tensor(np.array([1.0, 2.0, 3.0]))
    result = all_reduce(tensor)
    print(f"All-reduce result: {result.data}")

    # Test distributed sampler
    sampler = DistributedSampler(dataset_size=100, num_replicas=1, rank=0)
    indices = list(sampler)
    print(f"Sampler generated {len(indices)} indices")

    print("‚úÖ Basic functionality working")


if __name__ == "__main__":
    test_basic_functionality()
