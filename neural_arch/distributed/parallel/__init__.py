"""Model parallelism applied from outside a plain model: FSDP2, tensor, pipeline, checkpointing.

Use (inside an initialised process group; world size = dp_replicate*dp_shard*tp*pp)::

    from neural_arch.distributed.parallel import ParallelLayout, build_mesh, dp_rank, dp_size, ...
    layout = validate(ParallelLayout(dp_shard=2, tp=2), world_size)
    mesh = build_mesh(layout)
    model = parallelize_model(model, layout, mesh, plan)           # pp == 1: TP, then AC, then FSDP
    pipe = build_pipeline(model, layout, mesh, plan, sample_loss, microbatch_size)  # pp > 1
    view, whole = stage_view(pipe.modules), PipelineForward(pipe)  # full names; forward for validation
    placement = PipelinePlacement(view, whole, ...)  # or Replicated/ShardedPlacement: one interface (placement/)
    loss = data_parallel_loss(per_sample_losses, global_count, dp_size(mesh))
    dcp.save(dcp_savable({"model": model_sd, "optim": optim_sd}), checkpoint_id=path)  # checkpoint_layout.py

Concern: spreading one model over many ranks so that every layout computes exactly what
one process would. The sampler gives each data-parallel rank (``dp_rank``/``dp_size``) its
share; tensor and pipeline peers of one data-parallel rank see the same samples. Apps
describe their model with a ``ParallelPlan`` next to it (``apps/<name>/parallelize.py``);
a model without one gets a plan read off its block list where that is obvious
(``infer_plan``: a ``ModuleList`` of identical blocks, as in every Hugging Face model).
Model files hold no distributed code. Built on torch's engines only (``fully_shard``,
DTensor ``parallelize_module``, ``torch.distributed.pipelining``, ``torch.utils.checkpoint``).
"""

from neural_arch.utils.lazy_exports import lazy_getattr

_WHERE = {
    **dict.fromkeys(("apply_activation_checkpointing",), "activation"),
    **dict.fromkeys(("dcp_restore", "dcp_savable", "gather_into"), "checkpoint_layout"),
    **dict.fromkeys(("apply_fsdp", "fsdp_mesh", "mixed_precision", "needs_fsdp", "without_gradient_sync"), "fsdp"),
    **dict.fromkeys(
        ("DTYPES", "PP_SCHEDULES", "ParallelLayout", "layout_from_dict", "validate", "validate_model"), "layout"
    ),
    **dict.fromkeys(("block_lists", "infer_plan", "resolve_plan", "tied_parameters"), "inferred_plan"),
    **dict.fromkeys(("MESH_DIMS", "build_mesh", "dp_mesh", "dp_rank", "dp_size", "is_dp_leader"), "mesh"),
    **dict.fromkeys(("SCHEDULES", "build_pipeline", "even_split", "local_stages"), "pipeline"),
    **dict.fromkeys(("PipelineForward",), "pipeline_forward"),
    **dict.fromkeys(("OwnStep", "Placement"), "placement.base"),
    **dict.fromkeys(("PipelinePlacement",), "placement.pipelined"),
    **dict.fromkeys(("ReplicatedPlacement",), "placement.replicated"),
    **dict.fromkeys(("ShardedPlacement",), "placement.sharded"),
    **dict.fromkeys(("ParallelPlan", "StageBuilder", "apply_layout", "check_plan", "parallelize_model"), "plan"),
    **dict.fromkeys(("stage_view",), "stage_view"),
    **dict.fromkeys(("PipelineRunner", "SampleLoss", "TiedParameters"), "step"),
    **dict.fromkeys(("FusedColwiseParallel", "TensorPlan", "apply_tensor_parallel"), "tensor"),
    **dict.fromkeys(("data_parallel_loss", "pad_rows"), "weighting"),
}
"""Public name -> the module that defines it. Imported on first use (PEP 562): the trainer's
plain data-parallel path then never loads DTensor and pipelining (with torch._dynamo and sympy:
seconds per process at start-up)."""

__getattr__ = lazy_getattr(__name__, _WHERE, globals())


__all__ = [
    "DTYPES",
    "MESH_DIMS",
    "PP_SCHEDULES",
    "SCHEDULES",
    "FusedColwiseParallel",
    "OwnStep",
    "ParallelLayout",
    "ParallelPlan",
    "PipelineForward",
    "PipelinePlacement",
    "Placement",
    "PipelineRunner",
    "ReplicatedPlacement",
    "SampleLoss",
    "ShardedPlacement",
    "StageBuilder",
    "TensorPlan",
    "TiedParameters",
    "apply_activation_checkpointing",
    "apply_fsdp",
    "apply_layout",
    "apply_tensor_parallel",
    "build_mesh",
    "block_lists",
    "build_pipeline",
    "check_plan",
    "data_parallel_loss",
    "dcp_restore",
    "dcp_savable",
    "gather_into",
    "infer_plan",
    "dp_mesh",
    "dp_rank",
    "dp_size",
    "even_split",
    "fsdp_mesh",
    "is_dp_leader",
    "layout_from_dict",
    "local_stages",
    "mixed_precision",
    "needs_fsdp",
    "pad_rows",
    "parallelize_model",
    "resolve_plan",
    "stage_view",
    "tied_parameters",
    "validate",
    "validate_model",
    "without_gradient_sync",
]
