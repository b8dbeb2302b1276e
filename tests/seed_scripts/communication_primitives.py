# Seed 004 "Communication Primitives", verbatim after the one import line the snippet assumes.
import numpy as np

from neural_arch.core.tensor import Tensor
from neural_arch.distributed import (  # assumed by the seed
    ReduceOp,
    all_gather,
    all_reduce,
    broadcast,
    get_world_size,
    init_process_group,
    reduce_scatter,
)

# Initialize process group first
init_process_group(backend="gloo")

# All-reduce: Sum tensors across all processes
tensor = Tensor(np.array([1.0, 2.0, 3.0]))
reduced = all_reduce(tensor, ReduceOp.SUM)
print(f"Reduced: {reduced.data}")  # Will be scaled by world_size

# All-gather: Collect tensors from all processes
gathered = all_gather(tensor)  # Returns list of tensors
print(f"Gathered {len(gathered)} tensors")

# Broadcast: Send tensor from one process to all
broadcast_tensor = broadcast(tensor, src=0)  # From rank 0
print(f"Broadcast: {broadcast_tensor.data}")

# Reduce-scatter: Reduce and scatter chunks (ensure tensor size divisible by world_size)
world_size = get_world_size()
data = np.random.randn(world_size * 2, 3).astype(np.float32)
large_tensor = Tensor(data)
scattered = reduce_scatter(large_tensor, ReduceOp.AVERAGE)
print(f"Scattered shape: {scattered.shape}")
