"""``DistributedDataParallel``: torch DDP with working ``no_sync`` and ``sync_gradients``.

Run: under a launcher, ``model = DistributedDataParallel(MyModel())`` then train as usual;
``loss.backward()`` averages gradients across ranks. At world size 1 the wrapper just
calls the module: there is nothing to synchronise. Built without a process group in a job
the environment says has several ranks, it raises ``MissingProcessGroupError``.

Built on ``torch.nn.parallel.DistributedDataParallel`` (bucketed all-reduce overlapped with
backward). What this adds:
- ``no_sync()`` as a method and as the free function ``no_sync(model)`` for gradient
  accumulation; the first backward outside it averages everything accumulated. The bare
  ``with no_sync():``, with no argument, covers every live wrapper of this process.
- ``sync_gradients()``: safe at any time. It averages gradients that were accumulated
  under ``no_sync`` and not yet synchronised, and does nothing when the last backward
  already synchronised them, so it never averages twice. It always averages exactly.
- ``compression=Compression("bf16" | "fp16" | "powersgd", ...)`` (compression.py): less
  communication for inexact gradients, on gloo as on NCCL; ``compression_state()`` /
  ``load_compression_state()`` carry PowerSGD's state through a checkpoint.
- A clear ``UnusedParametersError`` naming the parameters that got no gradient when
  ``find_unused_parameters=False``, instead of torch's "Expected to have finished
  reduction in the prior iteration" message.
- A bucket layout that a restart does not change (``find_unused_parameters=None``, the
  default, on 3 or more ranks): see ``_keeps_first_layout``.
State dict keys are ``module.<name>``, as with torch DDP.
"""

from __future__ import annotations

import re
import warnings
import weakref
from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar, Iterator, Optional, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from neural_arch.distributed.data_parallel.compression import Compression, attach
from neural_arch.distributed.runtime.guard import require_process_group
from neural_arch.distributed.runtime.process_group import get_rank, get_world_size

_NO_UNUSED_NOTE = "find_unused_parameters=True was specified in DDP constructor, but did not find any unused"


def _keeps_first_layout(world_size: int, static_graph: bool) -> bool:
    """Whether DDP should keep its first bucket layout for good (torch's unused-parameter mode).

    Why: torch DDP reduces a new wrapper's first backward in its first layout (parameters in
    definition order) and then rebuilds the buckets in the order the gradients became ready.
    A job restarted at step S (from disk or from memory) builds a new wrapper, so its step
    S + 1 reduces in the first layout where the uninterrupted run used the rebuilt one. gloo
    and NCCL sum an element's contributions in an order set by its place in the bucket: with
    2 ranks a + b is b + a, with 3 or more the float sum changes (8e-17 in float64 at 4
    ranks), and a resumed run would no longer be bitwise the run that never stopped. In
    torch's find_unused_parameters mode the reducer never rebuilds, so every step of every
    attempt reduces in the same layout. Its cost: one walk of the autograd graph and one
    small all-reduce of a used-parameter map per backward. Unused parameters then simply
    get no gradient, as in one process. ``static_graph=True`` rebuilds either way.
    """
    return world_size >= 3 and not static_graph


class UnusedParametersError(RuntimeError):
    """Some parameters received no gradient while ``find_unused_parameters=False``."""


class DistributedDataParallel(nn.Module):
    """Data-parallel wrapper; gradients are averaged over ranks during ``backward()``."""

    # Why: the bare ``with no_sync():`` names no model, so it must find the wrappers
    # this process built. Weak references: a wrapper is forgotten once the user drops it.
    _live: ClassVar[weakref.WeakSet[DistributedDataParallel]] = weakref.WeakSet()

    def __init__(
        self,
        module: nn.Module,
        bucket_size_mb: float = 25,
        find_unused_parameters: Optional[bool] = None,
        *,
        device_ids: Optional[Sequence[int]] = None,
        broadcast_buffers: bool = True,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        compression: Optional[Compression] = None,
        **torch_ddp_options: Any,
    ) -> None:
        super().__init__()
        require_process_group("DistributedDataParallel")
        if not isinstance(module, nn.Module):
            raise ValueError(f"DistributedDataParallel wraps an nn.Module, got {type(module).__name__}.")
        if not bucket_size_mb > 0:
            raise ValueError(f"bucket_size_mb={bucket_size_mb!r} must be > 0 (default 25).")
        self.module = module
        self.bucket_size_mb = float(bucket_size_mb)
        # None: the first layout is kept where a restart would otherwise change the sums.
        implicit = find_unused_parameters is None and _keeps_first_layout(get_world_size(), static_graph)
        self.find_unused_parameters = implicit or bool(find_unused_parameters)
        self._quiet_unused = implicit  # torch's "did not find any unused parameters" note is ours to silence
        self._pending = False  # gradients accumulated under no_sync, not yet averaged
        ddp: Optional[TorchDDP] = None
        if get_world_size() > 1:
            # Why: rank 0's initial weights are broadcast here, so every rank starts equal.
            ddp = TorchDDP(
                module,
                device_ids=self._device_ids(module, device_ids),
                bucket_cap_mb=self.bucket_size_mb,
                find_unused_parameters=self.find_unused_parameters,
                gradient_as_bucket_view=gradient_as_bucket_view,
                static_graph=static_graph,
                **self._buffer_option(broadcast_buffers),
                **torch_ddp_options,
            )
        # Not registered as a submodule: its parameters are self.module's, and the state
        # dict should read "module.<name>" exactly once.
        object.__setattr__(self, "_ddp", ddp)
        if compression is not None:
            compression.check()  # a bad setting is an error at any world size
        # At world size 1 nothing is communicated, so there is nothing to compress.
        use = ddp is not None and compression is not None
        self._compressor = attach(ddp, module, compression, self.bucket_size_mb) if use else None
        DistributedDataParallel._live.add(self)

    @staticmethod
    def _buffer_option(broadcast_buffers: bool) -> dict[str, bool]:
        # torch 2.13 deprecates broadcast_buffers; True is its default either way, and
        # False keeps the old meaning (no buffer sync at all), so pass it only then.
        return {} if broadcast_buffers else {"broadcast_buffers": False}

    @staticmethod
    def _device_ids(module: nn.Module, device_ids: Optional[Sequence[int]]) -> Optional[list[int]]:
        if device_ids is not None:
            return list(device_ids)
        first = next(module.parameters(), None)
        if first is not None and first.device.type == "cuda":
            return [first.device.index if first.device.index is not None else torch.cuda.current_device()]
        return None

    @property
    def torch_ddp(self) -> Optional[TorchDDP]:
        """The underlying torch DDP object (None at world size 1)."""
        return self._ddp

    def compression_state(self) -> Optional[dict[str, Any]]:
        """PowerSGD's state for a checkpoint (a collective: call on every rank); None when stateless."""
        return self._compressor.checkpoint_state() if self._compressor is not None else None

    def load_compression_state(self, state: Optional[dict[str, Any]]) -> Optional[str]:
        """Continue PowerSGD from ``compression_state()``; a one-line reason when it starts afresh instead."""
        return self._compressor.load_state(state or {}) if self._compressor is not None else None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        ddp = self._ddp
        if ddp is None:
            return self.module(*args, **kwargs)
        if torch.is_grad_enabled():
            # A backward inside no_sync leaves local gradients; one outside averages all.
            self._pending = not ddp.require_backward_grad_sync
        try:
            with warnings.catch_warnings():
                if self._quiet_unused:  # the flag was ours, not the user's: its performance note is noise
                    warnings.filterwarnings("ignore", message=_NO_UNUSED_NOTE)
                return ddp(*args, **kwargs)
        except RuntimeError as exc:
            if "Expected to have finished reduction" in str(exc):
                raise UnusedParametersError(self._unused_message(str(exc))) from None
            raise

    def _unused_message(self, torch_message: str) -> str:
        names = [n for n, p in self.module.named_parameters() if p.requires_grad]
        found = re.search(r"did not receive grad for rank \d+:\s*([\d\s]+)", torch_message)
        indices = [int(i) for i in found.group(1).split()] if found else []
        unused = [names[i] for i in indices if i < len(names)] or ["(unknown: see torch's message)"]
        return (
            f"rank {get_rank()}: parameters {unused} received no gradient in the previous "
            "backward, but DistributedDataParallel was built with find_unused_parameters=False. "
            "Fix: pass find_unused_parameters=True, or set requires_grad=False on parameters the "
            "forward does not use."
        )

    def train(self, mode: bool = True) -> DistributedDataParallel:
        super().train(mode)
        if self._ddp is not None:
            self._ddp.training = mode
        return self

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate local gradients without communicating."""
        if self._ddp is None:
            yield
            return
        with self._ddp.no_sync():
            yield

    def sync_gradients(self) -> None:
        """Average gradients accumulated under ``no_sync``; a no-op when already averaged."""
        if not self._pending or get_world_size() == 1:
            self._pending = False
            return
        params = [p for p in self.module.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:  # keep the flat layout identical on every rank
                p.grad = torch.zeros_like(p)
        average_gradients([p.grad for p in params], self.bucket_size_mb)
        self._pending = False


def _buckets(grads: Sequence[torch.Tensor], limit_bytes: int) -> list[list[torch.Tensor]]:
    """Consecutive same-dtype groups of at most ``limit_bytes`` (one tensor may exceed it)."""
    buckets: list[list[torch.Tensor]] = []
    used = 0
    for g in grads:
        nbytes = g.numel() * g.element_size()
        if buckets and used + nbytes <= limit_bytes and g.dtype == buckets[-1][0].dtype:
            buckets[-1].append(g)
            used += nbytes
        else:
            buckets.append([g])
            used = nbytes
    return buckets


def average_gradients(grads: Sequence[torch.Tensor], bucket_size_mb: float = 25) -> None:
    """In place: replace each gradient by its mean over ranks, one flat all-reduce per bucket."""
    size = get_world_size()
    if size == 1:
        return
    for bucket in _buckets(grads, max(1, int(bucket_size_mb * 2**20))):
        flat = torch.cat([g.reshape(-1) for g in bucket])
        dist.all_reduce(flat)
        flat /= size
        offset = 0
        for g in bucket:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()


@contextmanager
def no_sync(*models: nn.Module) -> Iterator[None]:
    """``with no_sync(model):`` — skip gradient sync for the given model(s).

    ``with no_sync():`` (no argument) skips it for every ``DistributedDataParallel`` of
    this package that is alive in this process; a torch DDP model must be passed by name.
    Plain (unwrapped) modules are accepted and need nothing, so the same code runs at
    world size 1.
    """
    if not models:
        models = tuple(DistributedDataParallel._live)
        if not models and get_world_size() > 1:
            raise ValueError(
                "no_sync() found no neural_arch DistributedDataParallel model to skip synchronisation "
                "for; wrap the model first, or pass it: `with no_sync(model):` (also for a torch DDP model)."
            )
    with ExitStack() as stack:
        for model in models:
            if isinstance(model, (DistributedDataParallel, TorchDDP)):
                stack.enter_context(model.no_sync())
            elif not isinstance(model, nn.Module):
                raise ValueError(f"no_sync: expected a model (nn.Module), got {type(model).__name__}.")
        yield
