"""Memory savings for training: recompute activations instead of storing them, and CUDA memory pools.

Use::

    from neural_arch.optimization import gradient_checkpointing, memory_pool_scope
    with gradient_checkpointing.checkpoint_scope():   # or: from neural_arch.optimization import checkpoint_scope
        with memory_pool_scope():
            loss = criterion(ddp_model(batch), targets)
            loss.backward()

``checkpoint_scope`` works on any plain or data-parallel model; for sharded layouts (FSDP,
tensor, pipeline) use the trainer's ``parallel.activation_checkpointing`` instead, which
wraps blocks before they are sharded.
"""

from neural_arch.optimization import gradient_checkpointing
from neural_arch.optimization.gradient_checkpointing import checkpoint_scope
from neural_arch.optimization.memory_pool import memory_pool_scope

__all__ = ["checkpoint_scope", "gradient_checkpointing", "memory_pool_scope"]
