"""Where the model lives: data-parallel replicas (DDP) or a ``parallel:`` layout (FSDP2, tensor parallel).

Used by components.py: ``placement = place_model(task, cfg, device)``; the loop then trains
``placement.model``, evaluates ``placement.plain``, gives the sampler ``dp_rank``/``dp_size``
and weights each rank's loss by ``dp_size`` (ranks that see different samples; tensor peers
see the same ones). Checkpoints always hold the *full* model and optimizer state in the
single-process format (parameter order of the plain model), gathered from the shards with
DCP's state-dict API, so a run saved on any layout resumes on any other, and ``export`` and
``generate`` read it as they read a DDP run's.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Optional

import torch
from torch import nn

import neural_arch.distributed as nd
from neural_arch.training.batch_coupling import exact_batch_coupling
from neural_arch.training.config import Config
from neural_arch.training.layout_check import layout_active
from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError


@dataclass
class Placement:
    """The model as trained and as evaluated, and which samples this rank sees."""

    model: nn.Module
    """What the training step calls (the DDP wrapper, or the parallelized model itself)."""
    plain: nn.Module
    """What evaluation and the report call: the model without the DDP wrapper."""
    dp_rank: int
    dp_size: int
    leader: bool
    """True on one rank per data-parallel group: the one whose loss and metric sums count."""
    sharded: bool
    """Parameters are DTensors (a ``parallel:`` layout)."""
    min_rows: int = 0
    """Rows every forward needs at least (DTensor cannot run on 0 rows: an empty share is padded)."""
    pipeline: Optional[Any] = None
    """The ``PipelineRunner`` of a ``pp > 1`` layout: it runs the training step (``model`` is then a
    view of this rank's stages, ``plain`` the whole forward over the pipeline)."""
    indices: Optional[dict[str, int]] = None
    """Pipelines: parameter name -> index in the full model (the checkpoint's optimizer keys)."""

    def no_sync(self) -> ContextManager[Any]:
        """Skip the gradient reduction of an accumulation micro-batch: DDP's ``no_sync``, or FSDP's
        reduce-scatter (``without_gradient_sync``); the next backward outside reduces the sum once."""
        if isinstance(self.model, nd.DistributedDataParallel):
            return self.model.no_sync()
        if not self.sharded:
            return contextlib.nullcontext()
        from neural_arch.distributed.parallel import without_gradient_sync  # DTensor: sharded layouts only

        return without_gradient_sync(self.model)

    def model_state(self) -> dict[str, torch.Tensor]:
        """The full model state (on rank 0 for sharded layouts: the others get an empty dict)."""
        if not self.sharded:
            return self.plain.state_dict()
        if self.pipeline is not None:
            from neural_arch.training.pipeline_state import pipeline_model_state  # loads DCP: pipelines only

            return pipeline_model_state(self.model, self.pipeline.group)
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return get_model_state_dict(self.plain, options=_full(cpu_offload=True))

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The full optimizer state keyed by parameter index, as ``optimizer.state_dict()`` of one process."""
        if not self.sharded:
            return optimizer.state_dict()
        if self.pipeline is not None:
            from neural_arch.training.pipeline_state import pipeline_optimizer_state

            return pipeline_optimizer_state(self.model, optimizer, self.pipeline.group, self.indices or {})
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        by_name = get_optimizer_state_dict(self.plain, optimizer, options=_full(cpu_offload=True))
        return _rekey(by_name, {name: i for i, name in enumerate(self._names())})

    def load(self, optimizer: torch.optim.Optimizer, model_state: dict[str, Any], optim_state: dict[str, Any]) -> None:
        """Load a full state (from a run on any layout) into this placement's model and optimizer."""
        if not self.sharded:
            self.plain.load_state_dict(model_state)
            optimizer.load_state_dict(optim_state)
            return
        if self.pipeline is not None:
            from neural_arch.training.pipeline_state import load_pipeline_state

            load_pipeline_state(self.model, optimizer, self.indices or {}, model_state, optim_state)
            return
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

        set_model_state_dict(self.plain, model_state, options=_full(cpu_offload=False))
        by_name = _rekey(optim_state, dict(enumerate(self._names())))
        set_optimizer_state_dict(self.plain, optimizer, by_name, options=_full(cpu_offload=False))

    def shard_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's part of the model and optimizer state (DTensors where sharded), named as in
        the full model, for a sharded checkpoint (``checkpoint.format: sharded``); nothing gathered."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        from neural_arch.distributed.parallel import dcp_savable

        if self.pipeline is not None:
            from neural_arch.training.pipeline_state import pipeline_shard_state

            return dcp_savable(pipeline_shard_state(self.model, optimizer, self.indices or {}))
        return dcp_savable(
            {"model": get_model_state_dict(self.plain), "optim": get_optimizer_state_dict(self.plain, optimizer)}
        )

    def load_shards(self, optimizer: torch.optim.Optimizer, step_dir: Path) -> None:
        """Load a sharded checkpoint saved on any layout into this placement (DCP reshards)."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

        from neural_arch.distributed.checkpoint import load_shards
        from neural_arch.distributed.parallel import dcp_restore

        target = self.shard_state(optimizer)  # allocated in this run's layout: DCP fills it in place
        load_shards(step_dir, target)
        loaded = dcp_restore(target)
        if self.pipeline is not None:
            from neural_arch.training.pipeline_state import load_pipeline_shards

            load_pipeline_shards(self.model, optimizer, self.indices or {}, loaded)
            return
        set_model_state_dict(self.plain, loaded["model"])
        set_optimizer_state_dict(self.plain, optimizer, loaded["optim"])

    def load_weights(self, step_dir: Path, state: dict[str, Any]) -> None:
        """Load only the model weights of a checkpoint of any layout and format (``run.init_from``);
        every rank. A sharded checkpoint is read shard by shard into this layout (DCP reshards)."""
        from neural_arch.distributed.checkpoint import has_shards, load_shards

        module = self.model if self.pipeline is not None else self.plain  # pipelines: this rank's stages
        if not self.sharded:
            if has_shards(state):
                load_shards(step_dir, {"model": module.state_dict()})  # filled in place
            else:
                module.load_state_dict(state["model"])
            return
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

        from neural_arch.distributed.parallel import dcp_restore, dcp_savable

        if self.pipeline is not None:
            from neural_arch.training.pipeline_state import reshard_stages

            reshard_stages(module)
        if has_shards(state):
            target = dcp_savable({"model": get_model_state_dict(module)})
            load_shards(step_dir, target)
            set_model_state_dict(module, dcp_restore(target)["model"])
            return
        mine = get_model_state_dict(module).keys()  # a pipeline rank's stages hold some of the names
        set_model_state_dict(module, {k: state["model"][k] for k in mine}, options=_full(cpu_offload=False))

    def compression_state(self) -> Optional[dict[str, Any]]:
        """DDP's gradient-compression state (PowerSGD's error feedback of every rank) for the checkpoint;
        None when there is none. A collective: call on every rank."""
        return self.model.compression_state() if isinstance(self.model, nd.DistributedDataParallel) else None

    def load_compression_state(self, state: Optional[dict[str, Any]]) -> Optional[str]:
        """Continue compression from ``compression_state()``; a one-line note when it restarts instead."""
        if not isinstance(self.model, nd.DistributedDataParallel):
            return None
        return self.model.load_compression_state(state)

    def whole_model(self, task: Task) -> nn.Module:
        """The unsharded model for rank 0's report (call on every rank: a sharded layout gathers it,
        one parameter at a time, straight into rank 0's copy: the whole model is held once)."""
        if not self.sharded:
            return self.plain
        if self.pipeline is not None:
            state = self.model_state()
            whole = task.build_model() if nd.get_rank() == 0 else self.plain
            if nd.get_rank() == 0:
                whole.load_state_dict(state)
            return whole
        from neural_arch.distributed.parallel import gather_into

        whole = task.build_model() if nd.get_rank() == 0 else None
        gather_into(self.plain, whole)
        return whole if whole is not None else self.plain  # only rank 0 writes the report

    def norm_parameters(self) -> list[nn.Parameter]:
        """The parameters whose gradients make up the gradient norm here (pipelines: each tied
        tensor once; the norm is then summed over the pipeline ranks, see step.py)."""
        return list(self.pipeline.owned_parameters() if self.pipeline is not None else self.model.parameters())

    def _names(self) -> list[str]:
        # The optimizer was built from plain.parameters(): the same order (tied weights once).
        return [name for name, _ in self.plain.named_parameters()]


def place_model(task: Task, cfg: Config, device: torch.device) -> Placement:
    """DDP over every rank, or the config's ``parallel:`` layout applied to the task's model.

    DDP builds the model in host memory and moves it to ``device``. A sharded layout builds it
    deferred (``deferred_init``: no parameter allocated, the random stream consumed as by a plain
    build) and allocates each part just before sharding it: FSDP one block at a time, tensor
    parallelism one planned submodule at a time, a pipeline only this rank's stages. So neither
    host nor device ever holds the whole model, and the initial weights are bitwise one process's."""
    if not layout_active(cfg.parallel):
        model = task.build_model().to(device)
        exact_batch_coupling(model, cfg)
        compression = cfg.ddp if cfg.ddp.compression != "none" else None
        # Gradients as views of DDP's buckets: the averaged bucket is the gradient, with no copy
        # back (a model-sized copy every step) and one gradient-sized buffer less. The values are
        # those of copying: the step sets gradients to None, so DDP scales each into its bucket.
        ddp = nd.DistributedDataParallel(
            model, bucket_size_mb=cfg.ddp.bucket_mb, compression=compression, gradient_as_bucket_view=True
        )
        return Placement(ddp, model, nd.get_rank(), nd.get_world_size(), leader=True, sharded=False)
    from neural_arch.distributed import parallel as par

    layout = par.validate(cfg.parallel, nd.get_world_size())
    model, materialize = _build_deferred(task)
    exact_batch_coupling(model, cfg, layout)
    mesh = par.build_mesh(layout, device_type=device.type)
    where = dict(
        dp_rank=par.dp_rank(mesh),
        dp_size=par.dp_size(mesh),
        leader=par.is_dp_leader(mesh),
        sharded=True,
        min_rows=1 if layout.tp > 1 else 0,
    )
    if layout.pp == 1:
        try:  # the task's plan, else one read off the model's block list; a refusal is a user error (exit 2)
            plan = par.resolve_plan(type(task).parallel_plan(), model, layout)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        par.parallelize_model(model, layout, mesh, plan, materialize)
        model.to(device)  # what no plan placed (e.g. buffers); the sharded parameters are there already
        return Placement(model, model, **where)
    from neural_arch.training.pipeline_state import parameter_indices

    indices = parameter_indices(model)  # before the stages replace parameters by shards
    # Fixed micro-batch rows: a full global batch's share fills the micro-batches exactly.
    rows = math.ceil(cfg.training.global_batch_size / layout.dp_size / layout.microbatches)
    plan = type(task).parallel_plan()
    runner = par.build_pipeline(model, layout, mesh, plan, task.sample_loss, rows, device, materialize)
    return Placement(
        par.stage_view(runner.modules), par.PipelineForward(runner), **where, pipeline=runner, indices=indices
    )


def _build_deferred(task: Task) -> tuple[nn.Module, Callable[[nn.Module], None]]:
    """The task's model, deferred; a plain build (and a note saying why) where the model's
    construction writes deferred tensors in a way that cannot be replayed."""
    from neural_arch.training.deferred_init import build_deferred

    rng = torch.get_rng_state()
    try:
        return build_deferred(task.build_model)
    except NotImplementedError as why:
        torch.set_rng_state(rng)  # the plain build starts from the same stream
        if nd.get_rank() == 0:
            print(f"note: the whole model is built on every rank before sharding ({why})", flush=True)
        return task.build_model(), lambda module: None


def _full(cpu_offload: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload)


def _rekey(state: dict[str, Any], keys: dict[Any, Any]) -> dict[str, Any]:
    """An optimizer state dict with its parameter keys mapped through ``keys`` (names <-> indices)."""
    if not state:
        return state  # a rank that does not hold the gathered state
    groups = [{**group, "params": [keys[p] for p in group["params"]]} for group in state["param_groups"]]
    return {"state": {keys[k]: v for k, v in state["state"].items()}, "param_groups": groups}
