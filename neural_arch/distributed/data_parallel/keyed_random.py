"""Random numbers keyed per sample: a sample gets the same dropout mask on any number of ranks.

Used by the training step around each micro-batch's forward (training/step.py)::

    session = KeyedRandomness(seed=cfg.run.seed, announce=rank == 0)
    with session.forward(step=7, sample_ids=[12, 40, 3]):   # this micro-batch's dataset indices
        losses = task.loss(model, rows)                       # dropout, rand_like, ... keyed

Why: ``nn.Dropout`` draws its mask from the process's own random stream, so which sample gets
which mask depends on how the global batch was split over ranks and micro-batches, and N
processes silently stop giving one process's answer. Inside ``forward`` every random op of
PyTorch (seen at the dispatch level: ``bernoulli_`` behind every dropout, including the one
inside ``scaled_dot_product_attention`` on the CPU, ``uniform_``, ``normal_``, ``rand_like``,
``randn``, ...) whose output has the micro-batch's samples along its first dimension (``[n,
...]``, or ``[n*k, ...]`` sample-major, as after a ``view(-1, d)``) gets each sample's values
from a generator seeded with a hash of (run seed, step, the sample's dataset index, the op's
call number in this forward) (keyed_hash.py). Nothing depends on the split, the rank, or the
process's RNG state, so a resumed run draws the same values, and activation-checkpoint
recomputation replays them (``recompute_contexts``, given to ``torch.utils.checkpoint``).

A random op that cannot be keyed (no batch dimension first, a user's own generator, a
random op that is not elementwise such as ``randperm``/``multinomial``, a fused CUDA
attention kernel with dropout) runs as before and is named in one warning line, once.
A process whose first keyed forward drew nothing (a model without dropout) skips the keying
from then on: no cost per op, and ``torch.compile``'d blocks run compiled.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from dataclasses import dataclass, field
from typing import Any, ContextManager, Iterator, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from neural_arch.distributed.data_parallel.keyed_hash import keyed_draw, sample_key
from neural_arch.distributed.data_parallel.keyed_ops import KEYED, draws_anything, is_random, out_shape

_ACTIVE: contextvars.ContextVar[Optional[_Forward]] = contextvars.ContextVar("neural_arch_keyed", default=None)
"""The forward being keyed in this thread, if any: activation checkpointing reads it to replay
the same draws in backward (torch keeps autocast and grad mode in thread-local state the same way)."""


@dataclass
class _Forward:
    """One keyed forward: which samples it holds and how many random ops it has drawn."""

    session: KeyedRandomness
    step: int
    samples: list[int]
    call: int = 0
    modules: list[str] = field(default_factory=list)
    why_not: str = ""
    """Why no op of this forward can be keyed (a pipeline's micro-batches are not ours to see)."""
    random_ops: int = 0
    """Random ops seen, keyed or not."""

    def _keys(self) -> list[int]:
        return [sample_key(self.session.seed, self.step, s, self.call) for s in self.samples]

    def uniform(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return keyed_draw(self._keys(), shape, dtype, device, _uniform, self.session.generators)

    def normal(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return keyed_draw(self._keys(), shape, dtype, device, _normal, self.session.generators)

    def keyable(self, shape: Sequence[int]) -> bool:
        n = len(self.samples)
        return n > 0 and len(shape) > 0 and shape[0] > 0 and shape[0] % n == 0


class _KeyingMode(TorchDispatchMode):
    """Replaces the random ops of one forward by keyed draws; names those it cannot key."""

    def __init__(self, fw: _Forward) -> None:
        super().__init__()
        self.fw = fw

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if not is_random(func) or not draws_anything(func, args):
            return func(*args, **kwargs)
        fw, handler = self.fw, KEYED.get(func)
        fw.random_ops += 1
        shape = out_shape(func, args)
        plain = all(type(a) in _PLAIN for a in args if isinstance(a, torch.Tensor))
        if handler is not None and kwargs.get("generator") is None and shape is not None and plain:
            if fw.keyable(shape) and not fw.why_not:
                result = handler(fw, args, kwargs)
                fw.call += 1
                return result
        why = fw.why_not or ("its tensor is a DTensor (tensor parallelism)" if not plain else "")
        fw.session.unkeyed(func, shape, fw, why)
        return func(*args, **kwargs)


def _uniform(row: torch.Tensor, generator: torch.Generator) -> object:
    return row.uniform_(generator=generator)


def _normal(row: torch.Tensor, generator: torch.Generator) -> object:
    return row.normal_(generator=generator)


_PLAIN = (torch.Tensor, torch.nn.Parameter)
"""Tensor types keyed draws can fill (a DTensor's local shard would need its global offsets)."""


class KeyedRandomness:
    """Keyed random draws for the training forwards of one run (see the module docstring)."""

    def __init__(
        self, seed: int, model: Optional[torch.nn.Module] = None, announce: bool = True, stream: Any = None
    ) -> None:
        self.seed = int(seed)
        self.announce = announce
        """Whether this process prints the warning lines (one rank of the job does)."""
        self.stream = stream
        self.names = {id(m): name or type(m).__name__ for name, m in model.named_modules()} if model else {}
        """Module -> its path in the model, for the warning lines."""
        self.track = announce
        """Track which module runs each op (the first forward only: the warnings come then)."""
        self.warned: set[tuple[str, str]] = set()
        self.generators: dict[str, torch.Generator] = {}
        """One generator per device, re-seeded for every sample's row (no generator is shared with
        anything else, so keyed draws take nothing from the process's own stream)."""
        self.keyed_ops = 0
        """Random draws keyed so far (tests and the benchmark read it)."""
        self.needed = True
        """False once a whole forward ran without any random op: the model has none (dropout 0), so
        later forwards skip the dispatch mode and its cost per op (and ``torch.compile`` is not
        held back by it)."""

    @contextlib.contextmanager
    def forward(self, step: int, sample_ids: Sequence[int], why_not: str = "") -> Iterator[None]:
        """Key every random op run inside by (seed, ``step``, the sample's id, call number);
        ``why_not``: none can be, for this reason (each is then named once)."""
        if not self.needed:
            yield
            return
        fw = _Forward(self, int(step), [int(s) for s in sample_ids], why_not=why_not)
        with self._keyed(fw):
            yield
        self.keyed_ops += fw.call
        self.track = False
        if fw.random_ops == 0 and self.keyed_ops == 0 and not self.warned:
            self.needed = False

    @contextlib.contextmanager
    def _keyed(self, fw: _Forward) -> Iterator[None]:
        token = _ACTIVE.set(fw)
        try:
            with _KeyingMode(fw), _module_names(fw):
                yield
        finally:
            _ACTIVE.reset(token)

    def unkeyed(self, func: Any, shape: Optional[Sequence[int]], fw: _Forward, why: str = "") -> None:
        """One warning line per op and module: its draws depend on how the batch was split."""
        where = fw.modules[-1] if fw.modules else "the task's loss"
        name = str(func).removeprefix("aten.")
        if (name, where) in self.warned:
            return
        self.warned.add((name, where))
        if self.announce:
            print(
                f"neural_arch: warning: random op {name} (shape {list(shape) if shape is not None else '?'}) in "
                f"{where} cannot be keyed per sample{f' ({why})' if why else ''}, so its values depend on the "
                "number of ranks; give it the batch as its first dimension and no generator, or use plain data "
                "parallelism or FSDP (docs/trainer.md, randomness)",
                file=self.stream or sys.stderr,
                flush=True,
            )


@contextlib.contextmanager
def _module_names(fw: _Forward) -> Iterator[None]:
    """Track the module running each op, for the warning line (global hooks, removed after)."""
    if not fw.session.track:
        yield
        return
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    names = fw.session.names

    def enter(module: torch.nn.Module, _args: Any) -> None:
        fw.modules.append(f"module '{names.get(id(module), type(module).__name__)}'")

    def leave(module: torch.nn.Module, _args: Any, _out: Any) -> None:
        if fw.modules:
            fw.modules.pop()

    pre, post = register_module_forward_pre_hook(enter), register_module_forward_hook(leave, always_call=True)
    try:
        yield
    finally:
        pre.remove()
        post.remove()


def recompute_contexts() -> tuple[ContextManager[Any], ContextManager[Any]]:
    """``torch.utils.checkpoint``'s ``context_fn``: the recomputation in backward draws what the
    forward drew (same call numbers), so checkpointed dropout stays keyed and its gradient right."""
    fw = _ACTIVE.get()
    if fw is None:
        return contextlib.nullcontext(), contextlib.nullcontext()
    start = fw.call

    @contextlib.contextmanager
    def replay() -> Iterator[None]:
        again = _Forward(fw.session, fw.step, fw.samples, call=start)
        with fw.session._keyed(again):
            yield

    return contextlib.nullcontext(), replay()
