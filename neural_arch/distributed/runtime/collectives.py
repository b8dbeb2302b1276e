"""Collectives on torch tensors or numpy arrays: all_reduce, all_gather, broadcast, ...

Run: ``torchrun --nproc_per_node=2 script.py`` where the script calls
``init_process_group()`` then e.g. ``all_reduce(np.ones(3))``; under plain ``python``
(world size 1) every collective is the identity. Without a process group in a job the
environment says has several ranks, every collective raises ``MissingProcessGroupError``
(see ``guard.py``) instead of silently acting as a world of one.

Every function is out-of-place: it returns a new tensor/array of the same kind (torch or
numpy) and leaves its argument untouched. Before communicating, ranks exchange a tiny
metadata record (which collective, op, dtype, shape) so that a mismatch raises a
``ValueError`` naming the ranks and shapes on *every* rank, instead of hanging or
silently reducing garbage. Pass ``check=False`` to skip that extra round trip.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable, Sequence, TypeVar, Union

import numpy as np
import torch
import torch.distributed as dist

from neural_arch.distributed.runtime.calls import counted
from neural_arch.distributed.runtime.guard import require_process_group
from neural_arch.distributed.runtime.process_group import get_backend, get_rank, get_world_size

ArrayLike = Union[torch.Tensor, np.ndarray]
T = TypeVar("T", torch.Tensor, np.ndarray)


class ReduceOp(Enum):
    """Reduction applied element-wise across ranks."""

    SUM = "sum"
    AVERAGE = "average"
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"

    @classmethod
    def parse(cls, op: Union[ReduceOp, str]) -> ReduceOp:
        """Accept a ReduceOp or its name (``"sum"``, ``"AVERAGE"``, ``"avg"``, ``"mean"``...)."""
        if isinstance(op, ReduceOp):
            return op
        name = str(op).lower()
        aliases = {"avg": "average", "mean": "average", "prod": "product"}
        name = aliases.get(name, name)
        for member in cls:
            if member.value == name:
                return member
        raise ValueError(f"op={op!r} is not a reduction; use one of {[m.name for m in cls]}.")


_TORCH_OPS = {
    ReduceOp.SUM: dist.ReduceOp.SUM,
    ReduceOp.AVERAGE: dist.ReduceOp.SUM,  # divided afterwards: exact and backend-independent
    ReduceOp.MAX: dist.ReduceOp.MAX,
    ReduceOp.MIN: dist.ReduceOp.MIN,
    ReduceOp.PRODUCT: dist.ReduceOp.PRODUCT,
}
_OP_CODES = {op: i for i, op in enumerate(ReduceOp)}
_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
]
_KINDS = ["all_reduce", "all_gather", "broadcast", "reduce_scatter"]
_MAX_DIMS = 12


def _to_tensor(value: ArrayLike, name: str = "tensor") -> tuple[torch.Tensor, Callable[[torch.Tensor], ArrayLike]]:
    """A private contiguous copy on the communication device, and how to convert back."""
    if isinstance(value, np.ndarray):
        try:
            buf = torch.from_numpy(np.array(value, copy=True, order="C"))
        except TypeError:
            raise ValueError(
                f"{name}: numpy dtype {value.dtype} has no torch equivalent; convert it to a "
                "numeric dtype such as float64 or int64 first."
            ) from None
        back: Callable[[torch.Tensor], ArrayLike] = lambda t: t.cpu().numpy()
    elif isinstance(value, torch.Tensor):
        buf = value.detach().clone(memory_format=torch.contiguous_format)
        device = value.device
        back = lambda t: t.to(device)
    else:
        raise ValueError(
            f"{name}: expected a torch.Tensor or numpy.ndarray, got {type(value).__name__}; "
            "wrap the value, e.g. torch.tensor(x) or numpy.asarray(x)."
        )
    if get_backend() == "nccl" and buf.device.type != "cuda":
        buf = buf.to(torch.device("cuda", torch.cuda.current_device()))
    return buf, back


def _describe(kind: str, t: torch.Tensor, op_code: int, extra: int) -> torch.Tensor:
    shape = list(t.shape)
    dims = shape[:_MAX_DIMS] + [0] * (_MAX_DIMS - min(len(shape), _MAX_DIMS))
    if len(shape) > _MAX_DIMS:  # fold the rest in so a difference there still shows
        dims[-1] = hash(tuple(shape[_MAX_DIMS - 1 :])) & 0x7FFFFFFF
    dtype_code = _DTYPES.index(t.dtype) if t.dtype in _DTYPES else 99
    record = [_KINDS.index(kind), op_code, dtype_code, t.dim(), extra] + dims
    return torch.tensor(record, dtype=torch.int64, device=t.device)


def _exchange_metadata(kind: str, t: torch.Tensor, op_code: int = -1, extra: int = 0) -> list[list[int]]:
    mine = _describe(kind, t, op_code, extra)
    records = [torch.empty_like(mine) for _ in range(get_world_size())]
    dist.all_gather(records, mine)
    return [r.tolist() for r in records]


def _shape_text(record: list[int]) -> str:
    kind, op_code, dtype_code, ndim = record[:4]
    dtype = str(_DTYPES[dtype_code]).replace("torch.", "") if dtype_code < len(_DTYPES) else "?"
    return f"{_KINDS[kind]}{tuple(record[5 : 5 + ndim])} {dtype}"


def _raise_mismatch(kind: str, records: list[list[int]], what: str) -> None:
    detail = "; ".join(f"rank {r}: {_shape_text(rec)}" for r, rec in enumerate(records))
    raise ValueError(
        f"{kind} on rank {get_rank()}: ranks disagree on {what} ({detail}). Every rank must call "
        "the same collective with the same op, dtype and shape."
    )


def _check_records(kind: str, records: list[list[int]], ignore_dim0: bool = False) -> None:
    first = records[0]
    for rec in records[1:]:
        if rec[0] != first[0]:
            _raise_mismatch(kind, records, "which collective they are in")
        if rec[1] != first[1] or rec[4] != first[4]:
            _raise_mismatch(kind, records, "the reduction op or source rank")
        if rec[2] != first[2]:
            _raise_mismatch(kind, records, "dtype")
        if rec[3] != first[3]:
            _raise_mismatch(kind, records, "the number of dimensions")
        start = 6 if ignore_dim0 else 5
        if rec[start:] != first[start:]:
            _raise_mismatch(kind, records, "shape")


def _finish_average(t: torch.Tensor, op: ReduceOp, world_size: int) -> torch.Tensor:
    if op is not ReduceOp.AVERAGE:
        return t
    if not (t.is_floating_point() or t.is_complex()):
        t = t.to(torch.float64)  # like numpy.mean: the average of integers is a float
    return t / world_size


@counted("all_reduce")
def all_reduce(tensor: T, op: Union[ReduceOp, str] = ReduceOp.SUM, *, check: bool = True) -> T:
    """Element-wise reduction over all ranks; every rank gets the result (default SUM)."""
    require_process_group("all_reduce")
    op = ReduceOp.parse(op)
    buf, back = _to_tensor(tensor)
    size = get_world_size()
    if size > 1:
        if check:
            _check_records("all_reduce", _exchange_metadata("all_reduce", buf, _OP_CODES[op]))
        dist.all_reduce(buf, op=_TORCH_OPS[op])
    return back(_finish_average(buf, op, size))  # type: ignore[return-value]


@counted("broadcast")
def broadcast(tensor: T, src: int = 0, *, check: bool = True) -> T:
    """Every rank gets ``src``'s tensor; the others must pass one of the same shape/dtype."""
    require_process_group("broadcast")
    size = get_world_size()
    if not 0 <= src < size:
        raise ValueError(f"broadcast: src={src} is not a rank of this world (0..{size - 1}).")
    buf, back = _to_tensor(tensor)
    if size > 1:
        if check:
            _check_records("broadcast", _exchange_metadata("broadcast", buf, extra=src))
        dist.broadcast(buf, src=src)
    return back(buf)  # type: ignore[return-value]


@counted("all_gather")
def all_gather(tensor: T, *, check: bool = True) -> list[T]:
    """Every rank's tensor, in rank order. The first dimension may differ across ranks.

    With ``check=False`` the shape exchange is skipped, so all shapes must be equal.
    """
    require_process_group("all_gather")
    buf, back = _to_tensor(tensor)
    size = get_world_size()
    if size == 1:
        return [back(buf)]  # type: ignore[list-item]
    records = None
    if check:
        records = _exchange_metadata("all_gather", buf)
        _check_records("all_gather", records, ignore_dim0=buf.dim() > 0)
    if records is None or buf.dim() == 0:  # equal shapes: one plain gather
        parts = [torch.empty_like(buf) for _ in range(size)]
        dist.all_gather(parts, buf)
        return [back(p) for p in parts]  # type: ignore[misc]
    lengths = [rec[5] for rec in records]
    longest = max(lengths)
    padded = buf
    if buf.shape[0] < longest:  # why: the backend needs equal sizes; pad, then trim
        pad = torch.zeros((longest - buf.shape[0],) + tuple(buf.shape[1:]), dtype=buf.dtype, device=buf.device)
        padded = torch.cat([buf, pad])
    parts = [torch.empty_like(padded) for _ in range(size)]
    dist.all_gather(parts, padded)
    return [back(p[:n]) for p, n in zip(parts, lengths)]  # type: ignore[misc]


@counted("reduce_scatter")
def reduce_scatter(tensor: T, op: Union[ReduceOp, str] = ReduceOp.SUM, *, check: bool = True) -> T:
    """Reduce across ranks, then rank r keeps chunk r of the first dimension.

    The first dimension must be divisible by the world size.
    """
    require_process_group("reduce_scatter")
    op = ReduceOp.parse(op)
    buf, back = _to_tensor(tensor)
    size = get_world_size()
    if buf.dim() == 0 or buf.shape[0] % size != 0:
        raise ValueError(
            f"reduce_scatter on rank {get_rank()}: first dimension of shape {tuple(buf.shape)} must "
            f"be divisible by the world size {size}; pad or trim the tensor."
        )
    if size > 1:
        if check:
            _check_records("reduce_scatter", _exchange_metadata("reduce_scatter", buf, _OP_CODES[op]))
        out = torch.empty((buf.shape[0] // size,) + tuple(buf.shape[1:]), dtype=buf.dtype, device=buf.device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(out, buf, op=_TORCH_OPS[op])
        buf = out
    return back(_finish_average(buf, op, size))  # type: ignore[return-value]


@counted("all_gather_object")
def all_gather_object(obj: object) -> list[object]:
    """Every rank's picklable object, in rank order (identity list at world size 1)."""
    require_process_group("all_gather_object")
    if get_world_size() == 1:
        return [obj]
    out: list[object] = [None] * get_world_size()
    dist.all_gather_object(out, obj)
    return out


__all__: Sequence[str] = ["ReduceOp", "all_reduce", "all_gather", "broadcast", "reduce_scatter", "all_gather_object"]
