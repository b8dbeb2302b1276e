"""The device mesh of a layout, and which share of the data this rank takes.

Use (inside an initialised process group)::

    mesh = build_mesh(layout)                      # dims ("pp", "dp_replicate", "dp_shard", "tp")
    sampler = DistributedSampler(n, num_replicas=dp_size(mesh), rank=dp_rank(mesh), batch_size=B)
    loss = data_parallel_loss(per_sample_losses, batch.global_size, dp_size(mesh))   # weighting.py

The mesh always has all four named dims, size-1 ones included, so code can ask for
``mesh["tp"]`` whatever the layout (a size-1 dim costs one trivial group). The order puts
tensor parallelism innermost (neighbouring ranks, the fastest links) and the pipeline
outermost, as torchtitan does. Rank r's coordinates are r's digits in that order.
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from neural_arch.distributed.parallel.layout import ParallelLayout, validate
from neural_arch.distributed.runtime.gloo_threads import batch_gloo_io_threads
from neural_arch.distributed.runtime.process_group import get_world_size

MESH_DIMS: tuple[str, ...] = ("pp", "dp_replicate", "dp_shard", "tp")
DP_DIMS: tuple[str, ...] = ("dp_replicate", "dp_shard")


def build_mesh(layout: ParallelLayout, device_type: str = "cpu") -> DeviceMesh:
    """A ``DeviceMesh`` over the default process group with the layout's four named dims.

    ``layout`` must fit this world: ``validate`` says so at no cost for a layout the config's
    check already passed for it (the trainer's), and checks one built in Python here."""
    validate(layout, get_world_size())
    shape = tuple(getattr(layout, name) for name in MESH_DIMS)
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=MESH_DIMS)
    batch_gloo_io_threads()  # the mesh's groups bring their own gloo I/O threads (gloo_threads.py)
    return mesh


def dp_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The 2-D (dp_replicate, dp_shard) sub-mesh: the ranks that see different samples."""
    return mesh[DP_DIMS]


def dp_size(mesh: DeviceMesh) -> int:
    """Number of data-parallel ranks (dp_replicate * dp_shard); what the sampler calls num_replicas."""
    return mesh["dp_replicate"].size() * mesh["dp_shard"].size()


def dp_rank(mesh: DeviceMesh) -> int:
    """This rank's data-parallel index; its tensor and pipeline peers share it (same samples)."""
    return mesh["dp_replicate"].get_local_rank() * mesh["dp_shard"].size() + mesh["dp_shard"].get_local_rank()


def is_dp_leader(mesh: DeviceMesh) -> bool:
    """True on one rank per data-parallel group (tp and pp coordinate 0): count its metrics once."""
    return mesh["tp"].get_local_rank() == 0 and mesh["pp"].get_local_rank() == 0
