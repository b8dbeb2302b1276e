"""Model parallelism applied from outside a plain model: FSDP2, tensor, pipeline, checkpointing.

Use (inside an initialised process group; world size = dp_replicate*dp_shard*tp*pp)::

    from neural_arch.distributed.parallel import ParallelLayout, build_mesh, dp_rank, dp_size, ...
    layout = validate(ParallelLayout(dp_shard=2, tp=2), world_size)
    mesh = build_mesh(layout)
    model = parallelize_model(model, layout, mesh, plan)           # pp == 1: TP, then AC, then FSDP
    pipe = build_pipeline(model, layout, mesh, plan, sample_loss, microbatch_size)  # pp > 1
    view, whole = stage_view(pipe.modules), PipelineForward(pipe)  # full names; forward for validation
    loss = data_parallel_loss(per_sample_losses, global_count, dp_size(mesh))
    dcp.save(dcp_savable({"model": model_sd, "optim": optim_sd}), checkpoint_id=path)  # checkpoint_layout.py

Concern: spreading one model over many ranks so that every layout computes exactly what
one process would. The sampler gives each data-parallel rank (``dp_rank``/``dp_size``) its
share; tensor and pipeline peers of one data-parallel rank see the same samples. Apps
describe their model with a ``ParallelPlan`` next to it (``apps/<name>/parallelize.py``);
model files hold no distributed code. Built on torch's engines only (``fully_shard``,
DTensor ``parallelize_module``, ``torch.distributed.pipelining``, ``torch.utils.checkpoint``).
"""

from neural_arch.distributed.parallel.activation import apply_activation_checkpointing
from neural_arch.distributed.parallel.checkpoint_layout import dcp_restore, dcp_savable
from neural_arch.distributed.parallel.fsdp import apply_fsdp, fsdp_mesh, mixed_precision, needs_fsdp
from neural_arch.distributed.parallel.layout import (
    DTYPES, PP_SCHEDULES, ParallelLayout, layout_from_dict, validate, validate_model,
)
from neural_arch.distributed.parallel.mesh import MESH_DIMS, build_mesh, dp_mesh, dp_rank, dp_size, is_dp_leader
from neural_arch.distributed.parallel.pipeline import SCHEDULES, build_pipeline, even_split, local_stages
from neural_arch.distributed.parallel.pipeline_forward import PipelineForward
from neural_arch.distributed.parallel.plan import ParallelPlan, StageBuilder, apply_layout, check_plan, parallelize_model
from neural_arch.distributed.parallel.stage_view import stage_view
from neural_arch.distributed.parallel.step import PipelineRunner, SampleLoss, TiedParameters
from neural_arch.distributed.parallel.tensor import FusedColwiseParallel, TensorPlan, apply_tensor_parallel
from neural_arch.distributed.parallel.weighting import data_parallel_loss, pad_rows

__all__ = [
    "DTYPES", "MESH_DIMS", "PP_SCHEDULES", "SCHEDULES",
    "FusedColwiseParallel", "ParallelLayout", "ParallelPlan", "PipelineForward", "PipelineRunner", "SampleLoss", "StageBuilder",
    "TensorPlan", "TiedParameters",
    "apply_activation_checkpointing", "apply_fsdp", "apply_layout", "apply_tensor_parallel", "build_mesh",
    "build_pipeline", "check_plan", "data_parallel_loss", "dcp_restore", "dcp_savable", "dp_mesh", "dp_rank", "dp_size", "even_split",
    "fsdp_mesh", "is_dp_leader", "layout_from_dict", "local_stages", "mixed_precision", "needs_fsdp",
    "pad_rows", "parallelize_model", "stage_view", "validate", "validate_model",
]
