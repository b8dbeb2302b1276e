"""Bytes a rank holds, counted from tensors' own storages, for memory.py (not run on its own).

Use::

    held = state_bytes(run.modules, run.opt)     # {"param": ..., "grad": ..., "optim": ...}
    counter = SavedBytes()
    run.step(around=lambda: counter.counting(run.modules, run.checkpointed))
    counter.peak                                 # bytes saved for backward, at their peak

Why storages and not ``numel``: FSDP2 pads shards, DDP's gradients are views of its
buckets, a tied matrix is one storage under two names; counting each distinct storage
(by ``untyped_storage().data_ptr()``, DTensors by their local tensor) once gives what the
rank really holds. Allocator overhead and temporaries freed within an op are not seen.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any, Iterable, Iterator, Optional

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.hooks import RemovableHandle


def _storage(t: torch.Tensor) -> torch.UntypedStorage:
    # _local_tensor, not to_local(): no autograd node inside a pack hook
    return (t._local_tensor if isinstance(t, DTensor) else t).untyped_storage()


def storage_bytes(tensors: Iterable[Optional[torch.Tensor]], seen: set[int]) -> int:
    """Bytes of the storages of ``tensors`` not in ``seen`` (which it extends)."""
    total = 0
    for t in tensors:
        if t is None:
            continue
        storage = _storage(t)
        if storage.data_ptr() == 0 or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def state_bytes(modules: list[nn.Module], opt: torch.optim.Optimizer) -> dict[str, int]:
    """Parameter, gradient and optimizer-state bytes held by this rank (each storage once)."""
    params = list({id(p): p for m in modules for p in m.parameters()}.values())
    optim = [v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    seen: set[int] = set()
    return {
        "param": storage_bytes(params, seen),
        "grad": storage_bytes((p.grad for p in params), seen),
        "optim": storage_bytes(optim, seen),
    }


class _Held:
    """What autograd stores instead of a saved tensor while counting: released with it."""

    __slots__ = ("counter", "ptr", "tensor")

    def __init__(self, counter: SavedBytes, ptr: int, tensor: torch.Tensor) -> None:
        self.counter, self.ptr, self.tensor = counter, ptr, tensor

    def __del__(self) -> None:
        self.counter.release(self.ptr)


class SavedBytes:
    """Peak bytes of distinct storages saved for backward and alive at the same time.

    Inside ``counting()`` a ``saved_tensors_hooks`` pack hook records every saved tensor's
    storage (once per storage, however many ops save it) until autograd frees it, so the
    peak is the most activation memory held between forwards and their backwards. Not
    counted: parameters (held anyway, and counted by ``state_bytes``; FSDP's gathered
    copies are freed after forward), found as the storages of the parameters and buffers
    of the modules running when the tensor is saved. A checkpointed block saves nothing
    through these hooks (checkpoint installs its own, innermost); what it does keep, its
    input, is counted by a forward pre-hook. Recomputation in backward runs under
    checkpoint's hooks and is not counted: it is freed within the block's backward.
    """

    def __init__(self) -> None:
        self.current = self.peak = 0
        self._live: dict[int, list[int]] = {}  # data_ptr -> [holders, bytes]
        self._params: Counter[int] = Counter()  # storages of the running modules' parameters
        self._kept: list[_Held] = []  # checkpointed blocks' inputs, alive until the counter goes

    def hold(self, t: torch.Tensor) -> Optional[_Held]:
        storage = _storage(t)
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in self._params:
            return None
        entry = self._live.setdefault(ptr, [0, storage.nbytes()])
        if entry[0] == 0:
            self.current += entry[1]
            self.peak = max(self.peak, self.current)
        entry[0] += 1
        return _Held(self, ptr, t)

    def release(self, ptr: int) -> None:
        entry = self._live[ptr]
        entry[0] -= 1
        if entry[0] == 0:
            self.current -= entry[1]
            del self._live[ptr]

    def _pack(self, t: torch.Tensor) -> Any:
        held = self.hold(t)
        return t if held is None else held

    @staticmethod
    def _unpack(packed: Any) -> torch.Tensor:
        return packed.tensor if isinstance(packed, _Held) else packed

    @contextlib.contextmanager
    def counting(self, modules: list[nn.Module], checkpointed: list[nn.Module]) -> Iterator[None]:
        handles = [h for m in modules for sub in m.modules() for h in self._track_params(sub)]
        handles += [b.register_forward_pre_hook(self._keep_input) for b in checkpointed]
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            for h in handles:
                h.remove()

    def _track_params(self, module: nn.Module) -> list[RemovableHandle]:
        entered: list[list[int]] = []  # what enter() counted: FSDP may swap parameters before leave()

        def enter(m: nn.Module, args: Any) -> None:
            owned = list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))
            entered.append([_storage(t).data_ptr() for t in owned])
            self._params.update(entered[-1])

        def leave(m: nn.Module, args: Any, out: Any) -> None:
            for ptr in entered.pop():
                self._params[ptr] -= 1
                if self._params[ptr] == 0:  # `in` must mean "a running module's parameter"
                    del self._params[ptr]

        return [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]

    def _keep_input(self, block: nn.Module, args: tuple[Any, ...]) -> None:
        for a in args:
            if isinstance(a, torch.Tensor) and (held := self.hold(a)) is not None:
                self._kept.append(held)
