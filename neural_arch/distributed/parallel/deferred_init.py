"""Build a model without allocating its parameters, then allocate them one module at a time.

Use: ``model, materialize = build_deferred(task.build_model)`` returns the model with every
parameter made by ``torch.empty`` (what ``nn.Linear``, ``nn.Embedding``, ... do) a placeholder
that holds no memory (a CPU-looking tensor, not a meta one: see ``_Deferred``);
``materialize(module)`` then gives ``module``'s parameters and buffers their real values in
host memory. A sharded layout calls it on one block just before sharding that block,
so a rank holds one block's full tensors at a time, never the whole model.

The values are bitwise those of calling ``build_model()`` in host memory: while it runs, every
in-place operation on a deferred tensor (``uniform_``, ``normal_``, ``fill_``, ``zero_``,
``copy_``, the slices ``nn.Embedding`` zeroes for ``padding_idx``, ...) is recorded with the
random generator's state just before it, and also run on a scratch tensor of the same shape, so
the random stream advances exactly as in a plain build (everything built after, and the state
the build leaves, are unchanged). ``materialize`` replays a tensor's record with those states.
An operation that reads a deferred tensor (``trunc_normal_``'s resampling test, a copy into a
buffer) runs on a real replay of it at that moment; a dtype conversion (``model.double()``)
stays deferred. Tensors made otherwise (``torch.zeros``, ``torch.randn``) are real from the start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

_EMPTY = {torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default}
_META = torch.device("meta")


@dataclass
class _Step:
    """One recorded in-place operation on (a view of) a deferred tensor."""

    func: Any
    view: tuple[tuple[int, ...], tuple[int, ...], int]
    """(size, stride, storage offset) of the tensor it was applied to, within the storage."""
    args: tuple[Any, ...]
    """The operation's other arguments; tensors among them are real snapshots."""
    kwargs: dict[str, Any]
    rng: Optional[tuple[torch.Generator, torch.Tensor]] = None
    """The generator a random operation draws from and its state just before."""


@dataclass
class _Record:
    """How to rebuild one deferred storage: allocate (or convert a parent), then replay ``steps``."""

    numel: int
    dtype: torch.dtype
    steps: list[_Step] = field(default_factory=list)
    parent: Optional[tuple[_Record, int, tuple[tuple[int, ...], tuple[int, ...], int], Any, dict[str, Any]]] = None
    """(record, steps of it to replay, view, conversion op, its kwargs) for a converted tensor."""

    def realize(self, upto: Optional[int] = None) -> torch.Tensor:
        """The storage's values after its first ``upto`` steps (all by default), as a flat real tensor."""
        if self.parent is None:
            flat = torch.empty(self.numel, dtype=self.dtype)
        else:
            record, count, view, func, kwargs = self.parent
            source = record.realize(count).as_strided(*view)
            flat = func(source, **kwargs).reshape(-1)
        for step in self.steps[:upto]:
            target = flat.as_strided(*step.view)
            if step.rng is None:
                step.func(target, *step.args, **step.kwargs)
                continue
            generator, state = step.rng
            saved = generator.get_state()
            generator.set_state(state)
            try:
                step.func(target, *step.args, **step.kwargs)
            finally:
                generator.set_state(saved)
        return flat


Geometry = tuple[tuple[int, ...], tuple[int, ...], int]


def _geometry(t: torch.Tensor) -> Geometry:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


class _Deferred(torch.Tensor):
    """A host tensor whose values are not allocated: its ``record`` says how to compute them.

    It reports device ``cpu`` (not ``meta``), so initialisers that skip meta tensors
    (``trunc_normal_``, ``orthogonal_``, ...) run as in a plain build and are recorded."""

    record: _Record

    @staticmethod
    def __new__(cls, record: _Record, geometry: Geometry, dtype: torch.dtype) -> _Deferred:
        size, stride, offset = geometry
        t = torch.Tensor._make_wrapper_subclass(
            cls, size, strides=stride, storage_offset=offset, dtype=dtype, device="cpu"
        )
        t.record = record
        return t

    # A traceable wrapper: Module._apply (``model.double()``) swaps such tensors whole, record included.
    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return [], self.record

    @staticmethod
    def __tensor_unflatten__(inner: Any, record: Any, size: Any, stride: Any) -> Any:
        raise NotImplementedError("deferred tensors are not traced")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        raise RuntimeError(f"{func} on a parameter that was never materialized (deferred_init.Materializer)")

    def meta(self) -> torch.Tensor:
        """A meta tensor of the same geometry (shape logic of view operations runs on it)."""
        base = torch.empty(self.record.numel, dtype=self.dtype, device=_META)
        return base.as_strided(*_geometry(self))

    def real(self) -> torch.Tensor:
        """The values as recorded so far, freshly computed (a plain tensor of the same shape)."""
        flat = self.record.realize()
        if self.is_contiguous() and self.storage_offset() == 0 and self.numel() == flat.numel():
            return flat.view(self.shape)  # the whole storage: no second copy
        return flat.as_strided(*_geometry(self)).clone()


def _real(t: Any) -> Any:
    return t.real() if isinstance(t, _Deferred) else t


class _Recorder(TorchDispatchMode):
    """Defers ``torch.empty`` on the host and records what is done to the deferred tensors."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if func in _EMPTY and torch.device(kwargs.get("device") or "cpu").type == "cpu":
            meta = func(*args, **{**kwargs, "device": _META, "pin_memory": None})
            record = _Record(meta.untyped_storage().nbytes() // meta.element_size(), meta.dtype)
            return _Deferred(record, _geometry(meta), meta.dtype)
        deferred = [t for t in _tensors(args, kwargs) if isinstance(t, _Deferred)]
        if not deferred:
            return func(*args, **kwargs)
        written = [a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if written:
            if written[0] != func._schema.arguments[0].name or not isinstance(args[0], _Deferred):
                raise NotImplementedError(f"deferred init: {func} writes into a deferred tensor through an argument")
            return self._record_in_place(func, args[0], args[1:], kwargs)
        if _is_view(func):
            source = args[0]
            out = func(source.meta(), *args[1:], **kwargs)
            return _Deferred(source.record, _geometry(out), out.dtype)
        if func is torch.ops.aten._to_copy.default and torch.device(kwargs.get("device") or "cpu").type == "cpu":
            source = args[0]
            out = func(source.meta(), **{**kwargs, "device": _META})
            conversion = {**kwargs, "device": torch.device("cpu")}
            parent = (source.record, len(source.record.steps), _geometry(source), func, conversion)
            return _Deferred(_Record(out.numel(), out.dtype, parent=parent), _geometry(out), out.dtype)
        # Anything else reads deferred values: it runs on real replays (its outputs are real).
        return func(*tree_map(_real, args), **tree_map(_real, kwargs))

    def _record_in_place(self, func: Any, target: _Deferred, rest: tuple, kwargs: dict) -> _Deferred:
        # Values as of now: a real tensor may change later, a deferred one is replayed now.
        snapshot = lambda t: (t.real() if isinstance(t, _Deferred) else t.clone()) if isinstance(t, torch.Tensor) else t
        step = _Step(func, _geometry(target), tree_map(snapshot, rest), tree_map(snapshot, kwargs))
        if torch.Tag.nondeterministic_seeded in func.tags:
            generator = kwargs.get("generator") or torch.default_generator
            step.rng = (generator, generator.get_state())
            # Draw the same numbers into a scratch tensor: the stream moves on as in a plain build.
            scratch = torch.empty(target.record.numel, dtype=target.dtype).as_strided(*step.view)
            func(scratch, *step.args, **step.kwargs)
        target.record.steps.append(step)
        return target


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    tree_map(lambda t: found.append(t) if isinstance(t, torch.Tensor) else None, (args, kwargs))
    return found


def _is_view(func: Any) -> bool:
    returns = func._schema.returns
    return len(returns) == 1 and returns[0].alias_info is not None and not returns[0].alias_info.is_write


class Materializer:
    """Gives deferred parameters and buffers real values, one module at a time (``__call__``)."""

    def __init__(self, root: nn.Module) -> None:
        self._root = root
        """The whole model: a parameter shared with a module outside the one materialized (tied
        weights) is replaced there too, so the two stay one parameter."""

    def __call__(self, module: nn.Module) -> None:
        """Make every deferred tensor under ``module`` real (those already real are left alone)."""
        # deferred parameter's id -> (it, its real parameter); holding it keeps the id unique
        real: dict[int, tuple[nn.Parameter, nn.Parameter]] = {}
        for sub in module.modules():
            for name, param in list(sub._parameters.items()):
                if isinstance(param, _Deferred):
                    if id(param) not in real:
                        real[id(param)] = (param, nn.Parameter(param.real(), requires_grad=param.requires_grad))
                    sub._parameters[name] = real[id(param)][1]
            for name, buffer in list(sub._buffers.items()):
                if isinstance(buffer, _Deferred):
                    sub._buffers[name] = buffer.real()
        if not real:
            return
        for sub in self._root.modules():  # the same parameters elsewhere in the model
            for name, param in list(sub._parameters.items()):
                if param is not None and id(param) in real and real[id(param)][0] is param:
                    sub._parameters[name] = real[id(param)][1]


def deferred(model: nn.Module) -> bool:
    """True while any parameter or buffer of ``model`` is still deferred."""
    return any(isinstance(t, _Deferred) for t in [*model.parameters(), *model.buffers()])


def build_deferred(build: Callable[[], nn.Module]) -> tuple[nn.Module, Materializer]:
    """``build()`` with its ``torch.empty`` tensors deferred, and the ``Materializer`` that fills them."""
    with _Recorder():
        model = build()
    return model, Materializer(model)
