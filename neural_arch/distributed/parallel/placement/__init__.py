"""Where the model lives, behind one interface: ``Placement`` and one class per layout.

Use: build one of the classes (the trainer's ``place_model`` picks it once, from the config),
then ask it what to do, never which layout it is::

    from neural_arch.distributed.parallel import ReplicatedPlacement
    placement = ReplicatedPlacement(ddp, model, dp_rank=rank, dp_size=world, leader=True)
    loss = task.loss(placement.model, rows)        # train placement.model, evaluate placement.plain
    with placement.no_sync(): ...                  # an accumulation micro-batch
    state = placement.model_state()                # the full single-process state, from any layout
    norm = placement.reduce_norm(total_norm([p.grad for p in placement.norm_parameters()]))

The classes: ``ReplicatedPlacement`` (DDP: every rank holds the whole model),
``ShardedPlacement`` (a ``parallel:`` layout without pipeline stages: FSDP2 and tensor
parallelism, parameters are DTensors) and ``PipelinePlacement`` (``pp > 1``: each rank holds
some stages, and the pipeline runs the training step itself, ``own_step``). A new layout is one
new subclass of ``Placement`` (base.py says what each method must do) and one line in the
factory that picks it. The names are exported by ``neural_arch.distributed.parallel`` and
imported on first use, so a plain data-parallel run never loads DTensor or DCP.
"""
