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
...]``, or ``[n*k, ...]`` sample-major, as after a ``view(-1, d)``) gets its values from a
counter-based hash of (run seed, step, the sample's dataset index, the op's call number in
this forward, the element's index within the sample). Nothing depends on the split, the
rank, or any RNG state, so a resumed run draws the same values, and activation-checkpoint
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
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment (odd, so element counters never collide)
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_BITS = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
"""Random bits per value: at most the format's significand, so ``k / 2**bits`` is exact and < 1."""

_ACTIVE: contextvars.ContextVar[Optional[_Forward]] = contextvars.ContextVar("neural_arch_keyed", default=None)
"""The forward being keyed in this thread, if any: activation checkpointing reads it to replay
the same draws in backward (torch keeps autocast and grad mode in thread-local state the same way)."""


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch stores it."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _mix_int(value: int) -> int:
    """splitmix64's finaliser on a Python int (the per-sample keys)."""
    value &= _MASK64
    value = ((value ^ (value >> 30)) * _MIX1) & _MASK64
    value = ((value ^ (value >> 27)) * _MIX2) & _MASK64
    return value ^ (value >> 31)


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix_tensor(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser elementwise; int64 multiplication wraps modulo 2**64 as intended."""
    x = (x ^ _shr(x, 30)) * _signed(_MIX1)
    x = (x ^ _shr(x, 27)) * _signed(_MIX2)
    return x ^ _shr(x, 31)


def sample_key(seed: int, step: int, sample: int, call: int, lane: int = 0) -> int:
    """The 64-bit key of one sample's values in one random op (``lane``: a second stream of the
    same op, e.g. Box-Muller's second uniform)."""
    key = _GAMMA
    for part in (seed, step, sample, call, lane):
        key = _mix_int(key ^ (part & _MASK64))
    return key


def keyed_uniform(keys: Sequence[int], shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Uniform [0, 1) values of ``shape`` whose first dimension holds ``len(keys)`` samples
    (sample-major): sample i's values depend only on ``keys[i]`` and their position in it."""
    rows = len(keys)
    per_row = math.prod(shape) // rows if rows else 0
    key = torch.tensor([_signed(k) for k in keys], dtype=torch.int64, device=device).unsqueeze(1)
    counter = torch.arange(1, per_row + 1, dtype=torch.int64, device=device).unsqueeze(0)
    bits = _BITS.get(dtype, 24)
    drawn = _shr(_mix_tensor(key + counter * _signed(_GAMMA)), 64 - bits)
    wide = torch.float64 if bits > 24 else torch.float32
    return (drawn.to(wide) * 2.0**-bits).to(dtype).reshape(shape)


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

    def uniform(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device, lane: int = 0) -> torch.Tensor:
        keys = [sample_key(self.session.seed, self.step, s, self.call, lane) for s in self.samples]
        return keyed_uniform(keys, shape, dtype, device)

    def keyable(self, shape: Sequence[int]) -> bool:
        n = len(self.samples)
        return n > 0 and len(shape) > 0 and shape[0] > 0 and shape[0] % n == 0


def _floating(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype.is_floating_point else torch.float64


def _gaussian(fw: _Forward, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Standard normal values by Box-Muller from two keyed uniforms (lanes 0 and 1), in float64."""
    u1 = fw.uniform(shape, torch.float64, device, lane=0)
    u2 = fw.uniform(shape, torch.float64, device, lane=1)
    return (torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)).to(dtype)


def _out_kwargs(kwargs: dict[str, Any], like: torch.Tensor) -> tuple[torch.dtype, torch.device]:
    return kwargs.get("dtype") or like.dtype, kwargs.get("device") or like.device


def _inplace(fill: Callable[[_Forward, torch.Tensor, tuple, dict], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def run(fw: _Forward, args: tuple, kwargs: dict) -> torch.Tensor:
        target = args[0]
        with torch.no_grad():
            target.copy_(fill(fw, target, args, kwargs))
        return target

    return run


def _bernoulli_fill(fw: _Forward, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    u = fw.uniform(t.shape, torch.float64, t.device)
    return u < (p.double() if isinstance(p, torch.Tensor) else p)


def _uniform_fill(fw: _Forward, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    low = args[1] if len(args) > 1 else kwargs.get("from", 0.0)
    high = args[2] if len(args) > 2 else kwargs.get("to", 1.0)
    return low + (high - low) * fw.uniform(t.shape, _floating(t.dtype), t.device)


def _normal_fill(fw: _Forward, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    mean = args[1] if len(args) > 1 else kwargs.get("mean", 0.0)
    std = args[2] if len(args) > 2 else kwargs.get("std", 1.0)
    return mean + std * _gaussian(fw, t.shape, _floating(t.dtype), t.device)


def _exponential_fill(fw: _Forward, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    rate = args[1] if len(args) > 1 else kwargs.get("lambd", 1.0)
    return -torch.log1p(-fw.uniform(t.shape, torch.float64, t.device)) / rate


def _bernoulli_probs(fw: _Forward, args: tuple, kwargs: dict) -> torch.Tensor:
    probs = args[0]
    return (fw.uniform(probs.shape, torch.float64, probs.device) < probs.double()).to(probs.dtype)


def _bernoulli_p(fw: _Forward, args: tuple, kwargs: dict) -> torch.Tensor:
    like, p = args[0], args[1] if len(args) > 1 else kwargs.get("p", 0.5)
    return (fw.uniform(like.shape, torch.float64, like.device) < p).to(like.dtype)


def _rand_like(fw: _Forward, args: tuple, kwargs: dict) -> torch.Tensor:
    dtype, device = _out_kwargs(kwargs, args[0])
    return fw.uniform(args[0].shape, dtype, device)


def _randn_like(fw: _Forward, args: tuple, kwargs: dict) -> torch.Tensor:
    dtype, device = _out_kwargs(kwargs, args[0])
    return _gaussian(fw, args[0].shape, dtype, device)


def _factory(gaussian: bool) -> Callable[..., torch.Tensor]:
    def run(fw: _Forward, args: tuple, kwargs: dict) -> torch.Tensor:
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        device = kwargs.get("device") or torch.device("cpu")
        shape = list(args[0])
        return _gaussian(fw, shape, dtype, device) if gaussian else fw.uniform(shape, dtype, device)

    return run


def _native_dropout(fw: _Forward, args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    x, p = args[0], args[1]
    keep = fw.uniform(x.shape, torch.float64, x.device) >= p
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    return x * keep.to(x.dtype) * scale, keep


_KEYED: dict[Any, Callable[..., Any]] = {
    aten.bernoulli_.float: _inplace(_bernoulli_fill),
    aten.bernoulli_.Tensor: _inplace(_bernoulli_fill),
    aten.uniform_.default: _inplace(_uniform_fill),
    aten.normal_.default: _inplace(_normal_fill),
    aten.exponential_.default: _inplace(_exponential_fill),
    aten.bernoulli.default: _bernoulli_probs,
    aten.bernoulli.p: _bernoulli_p,
    aten.rand_like.default: _rand_like,
    aten.randn_like.default: _randn_like,
    aten.rand.default: _factory(gaussian=False),
    aten.randn.default: _factory(gaussian=True),
    aten.native_dropout.default: _native_dropout,
}
"""Random ops drawn from the per-sample keys instead of the process's stream."""


def _out_shape(func: Any, args: tuple) -> Optional[Sequence[int]]:
    if func in (aten.rand.default, aten.randn.default):
        return list(args[0])
    first = args[0] if args else None
    return first.shape if isinstance(first, torch.Tensor) else None


def _is_random(func: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())


def _native_dropout_active(func: Any, args: tuple) -> bool:
    """``native_dropout(x, p, train=False)`` (or ``p == 0``) draws nothing."""
    return func is not aten.native_dropout.default or bool(args[2] if len(args) > 2 else True) and args[1] > 0


class _KeyingMode(TorchDispatchMode):
    """Replaces the random ops of one forward by keyed draws; names those it cannot key."""

    def __init__(self, fw: _Forward) -> None:
        super().__init__()
        self.fw = fw

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if not _is_random(func) or not _native_dropout_active(func, args):
            return func(*args, **kwargs)
        fw, handler = self.fw, _KEYED.get(func)
        fw.random_ops += 1
        shape = _out_shape(func, args)
        plain = all(type(a) in _PLAIN for a in args if isinstance(a, torch.Tensor))
        if handler is not None and kwargs.get("generator") is None and shape is not None and plain:
            if fw.keyable(shape) and not fw.why_not:
                result = handler(fw, args, kwargs)
                fw.call += 1
                return result
        why = fw.why_not or ("its tensor is a DTensor (tensor parallelism)" if not plain else "")
        fw.session.unkeyed(func, shape, fw, why)
        return func(*args, **kwargs)


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
