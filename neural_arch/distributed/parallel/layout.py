"""How one model is spread over the world: ``ParallelLayout`` and its one-line checks.

Use: ``layout = ParallelLayout(dp_shard=2, tp=2); validate(layout, world_size=4)``; then
``build_mesh(layout)`` (mesh.py) and the ``apply_*`` functions.

``validate`` is the one function that holds the rules of a layout. Every check goes through
it: the config's (training/layout_check.py, before any process starts and again in each
worker for the world that started) and ``build_mesh``'s; a process runs the rules at most once
for a given (layout, world size) and every later call answers from that result.

The four sizes multiply to the world size. ``dp_replicate`` x ``dp_shard`` ranks see
different samples (``dp_size``); the ``tp`` ranks of one tensor-parallel group and the
``pp`` ranks of one pipeline see the *same* samples, so they never count in the loss
weight (see ``data_parallel_loss``).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Literal, Optional, cast

import torch

PipelineSchedule = Literal["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"]
PP_SCHEDULES: tuple[str, ...] = typing.get_args(PipelineSchedule)
MULTI_STAGE_SCHEDULES: tuple[str, ...] = ("interleaved_1f1b", "zero_bubble")
"""Schedules that put ``VIRTUAL_STAGES`` stages on each pipeline rank (looped: rank r holds r, r+pp)."""
VIRTUAL_STAGES = 2

DtypeName = Literal["fp32", "fp64", "bf16", "fp16"]
"""Names accepted for ``param_dtype`` / ``reduce_dtype``."""
DTYPES: dict[str, torch.dtype] = dict(
    zip(typing.get_args(DtypeName), (torch.float32, torch.float64, torch.bfloat16, torch.float16))
)
"""Each ``DtypeName`` and its torch dtype."""


@dataclass(frozen=True)
class ParallelLayout:
    """Sizes of each kind of parallelism plus the pipeline and memory settings."""

    dp_replicate: int = 1
    """Data-parallel groups holding full replicas of the (dp_shard-sharded) model; HSDP when dp_shard > 1 too."""
    dp_shard: int = 1
    """Ranks that shard parameters, gradients and optimizer state (FSDP2, ZeRO-3) and see different samples."""
    tp: int = 1
    """Tensor-parallel ranks: each holds a slice of every sharded matrix (heads, MLP columns)."""
    sequence_parallel: bool = False
    """With tp > 1: norms, dropout and the residual stream run on 1/tp of the sequence per rank
    (the app's sequence-parallel styles); all-gather + reduce-scatter replace each all-reduce."""
    pp: int = 1
    """Pipeline ranks: each runs a contiguous range of blocks."""
    pp_schedule: PipelineSchedule = "1f1b"
    """Order of micro-batch forwards/backwards; interleaved_1f1b and zero_bubble run 2 stages per rank."""
    microbatches: Optional[int] = None
    """Micro-batches each pipeline step splits this data-parallel rank's share into; null (the
    default) means ``pp``, the fewest every schedule accepts (one per pipeline rank), and 1 when pp=1."""
    activation_checkpointing: int = 0
    """0: none; 1: every block recomputes its activations in backward; k: blocks 0, k, 2k, ..."""
    param_dtype: Optional[DtypeName] = None
    """FSDP compute dtype of parameters (fp32/fp64/bf16/fp16); None keeps the model's."""
    reduce_dtype: Optional[DtypeName] = None
    """FSDP dtype of the gradient reduction; None: the parameters' dtype."""
    reshard_after_forward: bool = True
    """FSDP frees the gathered parameters after each forward (ZeRO-3); False keeps them to backward."""
    gather_for_eval: bool = True
    """FSDP gathers the model once for a whole validation and report (not per batch or per generated
    token) where every rank has the memory for it (else per forward, with one note); False: always per forward."""
    cpu_offload: bool = False
    """CUDA runs: FSDP keeps the sharded parameters, gradients and optimizer state in host memory
    (FSDP2's ``CPUOffloadPolicy``; the optimizer steps on the CPU). Needs dp_shard or dp_replicate > 1."""

    def __post_init__(self) -> None:
        # Resolved here, once, so every reader (the schedule, the batch checks, the trainer)
        # sees a plain count and `--set parallel.pp=2` alone is a layout that runs.
        if self.microbatches is None:
            object.__setattr__(self, "microbatches", self.pp if isinstance(self.pp, int) else 1)

    @property
    def dp_size(self) -> int:
        """Ranks that see different samples: dp_replicate * dp_shard."""
        return self.dp_replicate * self.dp_shard

    @property
    def world_size(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp * self.pp

    @property
    def stages_per_rank(self) -> int:
        """Pipeline stages each pipeline rank runs (1, or VIRTUAL_STAGES for interleaved schedules)."""
        return VIRTUAL_STAGES if self.pp > 1 and self.pp_schedule in MULTI_STAGE_SCHEDULES else 1

    @property
    def num_stages(self) -> int:
        return self.pp * self.stages_per_rank


_CHECKED: set[str] = set()
"""The (layout, world size) pairs this process has checked, as ``_key`` writes them: ``validate``
runs the rules once per pair, keyed by value (an equal layout built again is the same pair)."""


def validate(layout: ParallelLayout, world_size: int) -> ParallelLayout:
    """Return ``layout`` if it can run on ``world_size`` ranks; else raise a one-line ``ValueError``.

    The one place the layout's rules live (``_check_rules``). They run once per process for a
    given (layout, world size): a pair that passed is remembered, so the next caller (the
    worker's config check after the launcher's, ``build_mesh`` after the config's) gets the
    answer without checking again. A layout that fails is checked (and refused) every time."""
    key = _key(layout, world_size)
    if key not in _CHECKED:
        _check_rules(layout, world_size)
        _CHECKED.add(key)
    return layout


def _key(layout: ParallelLayout, world_size: int) -> str:
    # repr, not the dataclass's equality: True == 1 and 2.0 == 2, but only the int is a valid size
    return f"{layout!r} on {world_size!r}"


def _check_rules(layout: ParallelLayout, world_size: int) -> None:
    """Every rule of a layout on ``world_size`` ranks (called by ``validate`` only)."""
    sizes = ("dp_replicate", "dp_shard", "tp", "pp", "microbatches")
    for key in sizes:
        _check_positive(key, getattr(layout, key))
    _check_choices(layout)
    _check_count("activation_checkpointing", layout.activation_checkpointing, 0)
    _check_sequence_parallel(layout)
    _check_cpu_offload(layout)
    microbatches = cast(int, layout.microbatches)  # a count since __post_init__, positive as checked above
    if layout.world_size != world_size:
        raise ValueError(
            f"parallel: dp_replicate*dp_shard*tp*pp = {layout.dp_replicate}*{layout.dp_shard}*{layout.tp}*{layout.pp}"
            f" = {layout.world_size} but the world has {world_size} processes; make the product {world_size}"
        )
    if layout.pp > 1 and microbatches < layout.pp:
        raise ValueError(
            f"parallel.microbatches={microbatches} is less than pp={layout.pp}; a pipeline "
            f"needs at least one micro-batch per stage rank: set microbatches >= {layout.pp}"
        )
    if layout.pp > 1 and layout.pp_schedule in MULTI_STAGE_SCHEDULES and microbatches % layout.pp:
        raise ValueError(
            f"parallel.microbatches={microbatches} with pp_schedule={layout.pp_schedule!r} "
            f"must be a multiple of pp={layout.pp}; e.g. microbatches={_round_up(microbatches, layout.pp)}"
        )
    if layout.pp == 1 and microbatches != 1:
        raise ValueError(
            f"parallel.microbatches={microbatches} splits a pipeline step but pp=1; set "
            "microbatches=1 (use gradient accumulation to split a batch without a pipeline)"
        )


def validate_model(layout: ParallelLayout, n_blocks: int, n_heads: Optional[int] = None) -> None:
    """One-line ``ValueError`` when the model's block or head count cannot be split as asked."""
    if layout.num_stages > n_blocks:
        what = f"pp={layout.pp}" + (
            f" x {layout.stages_per_rank} stages per rank ({layout.pp_schedule})" if layout.stages_per_rank > 1 else ""
        )
        raise ValueError(
            f"parallel: {what} = {layout.num_stages} pipeline stages but the model has {n_blocks} "
            "blocks; use at most one stage per block"
        )
    if n_heads is not None and n_heads % layout.tp:
        raise ValueError(
            f"parallel.tp={layout.tp} does not divide the model's {n_heads} attention heads; "
            f"choose tp among {[d for d in range(1, n_heads + 1) if n_heads % d == 0]}"
        )


def layout_from_dict(values: dict[str, Any]) -> ParallelLayout:
    """A layout from plain keys (e.g. a config section); unknown keys are a one-line error."""
    known = {f.name for f in dataclasses.fields(ParallelLayout)}
    for key in values:
        if key not in known:
            raise ValueError(f"parallel: unknown key {key!r}; expected one of {sorted(known)}")
    return ParallelLayout(**values)


def _check_sequence_parallel(layout: ParallelLayout) -> None:
    if not isinstance(layout.sequence_parallel, bool):
        raise ValueError(f"parallel.sequence_parallel={layout.sequence_parallel!r} must be true or false")
    if layout.sequence_parallel and layout.tp == 1:
        raise ValueError(
            "parallel.sequence_parallel=true splits the sequence over tensor-parallel ranks but tp=1; "
            "set tp >= 2 or sequence_parallel=false"
        )


def _check_cpu_offload(layout: ParallelLayout) -> None:
    if not isinstance(layout.cpu_offload, bool):
        raise ValueError(f"parallel.cpu_offload={layout.cpu_offload!r} must be true or false")
    if layout.cpu_offload and layout.dp_size == 1:
        raise ValueError(
            "parallel.cpu_offload=true offloads FSDP's shards, but no rank shards or replicates "
            "(dp_shard = dp_replicate = 1); set parallel.dp_shard > 1 or cpu_offload=false"
        )


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _check_count(key: str, value: Any, minimum: int) -> None:
    # bool is an int subclass, and True would silently mean 1
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"parallel.{key}={value!r} must be an integer >= {minimum}")


def _check_positive(key: str, value: Any) -> None:
    _check_count(key, value, 1)


def _check_choices(layout: ParallelLayout) -> None:
    """Every ``Literal`` field against its annotation (``pp_schedule``, the dtypes): the one list of
    choices, which typed_config.py also checks a config's values against as it reads them."""
    for name, tp in typing.get_type_hints(ParallelLayout).items():
        allowed = _literal_values(tp)
        value = getattr(layout, name)
        if allowed is not None and value not in allowed:
            shown = ", ".join("null" if a is None else str(a) for a in allowed)
            raise ValueError(f"parallel.{name}={value!r} is not one of {shown}")


def _literal_values(tp: Any) -> Optional[tuple[Any, ...]]:
    """What ``Literal[...]`` allows (with None for ``Optional[Literal[...]]``); None for any other type."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    args = typing.get_args(tp)
    inner = [a for a in args if a is not type(None)]
    if len(args) == 2 and len(inner) == 1 and typing.get_origin(inner[0]) is Literal:
        return (*typing.get_args(inner[0]), None)
    return None
