"""No compiler import for eager training: torch's "disable dynamo here" wrappers, resolved lazily.

Used once per process before the optimizer is built (``components.py``)::

    defer_dynamo_imports()   # idempotent; training.compile=true imports the compiler itself

Why: ``torch.optim.Optimizer.add_param_group`` (and ``zero_grad``, ``state_dict``,
``load_state_dict``, every optimizer's functional step) are wrapped in
``torch._compile._disable_dynamo``, which imports ``torch._dynamo`` on its first call to build a
"do not trace this" wrapper. That import (sympy, FX, the dynamo variable tree) costs more than
``import torch`` itself (2-4 s of a 1-step run on a loaded 2-core machine), for an eager run that
never compiles anything.

torch's ``DistributedDataParallel`` reads ``torch._dynamo.utils.get_optimize_ddp_mode()`` in its
constructor and wraps ``_inside_ddp_forward`` the same way: ``ddp_without_compiler()`` around the
construction answers the one read with the value of torch's default config (``optimize_ddp=True``:
"ddp_optimizer", which leaves eager DDP as it is) and shims the wrapper, while the compiler is
not imported; once it is, torch's own code runs.

Exactness: a dynamo-disabled function differs from the plain one only while dynamo traces or its
frame hook is installed, and both need ``torch._dynamo`` imported. So each wrapper's cached
"disabled" function is set to a shim that calls the plain function while ``torch._dynamo`` is not
in ``sys.modules`` and, once anything (``torch.compile``, a user's model) has imported it, builds
torch's real disabled function, caches it in place of itself and calls that from then on.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterable, Iterator
from types import SimpleNamespace
from typing import Any, Callable

import torch
import torch.optim

_CACHE = "__dynamo_disable"
"""The attribute where ``torch._compile._disable_dynamo``'s wrapper caches its disabled function."""


def defer_dynamo_imports(modules: Iterable[Any] = ()) -> int:
    """Install the lazy shim on every ``_disable_dynamo`` wrapper reachable from ``modules``
    (default: ``torch.optim`` and its imported submodules) and from the dispatch modes defined
    so far (functions, classes' methods, optimizers' functional steps); returns how many were newly
    shimmed (0 on a second call, once ``torch._dynamo`` is imported, or where torch changed how
    the wrapper caches)."""
    if "torch._dynamo" in sys.modules:
        return 0  # the compiler is here already: torch's own wrappers cost nothing more
    code = _disable_dynamo_code()
    modules = list(modules) or [m for name, m in list(sys.modules.items()) if name.split(".")[:2] == ["torch", "optim"]]
    if code is None:
        return 0
    count = 0
    for wrapper in _candidates([*modules, *_dispatch_modes()]):
        if getattr(wrapper, "__code__", None) is not code:
            continue
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in wrapper.__closure__ or ())))
        fn, recursive = cells.get("fn"), cells.get("recursive", True)
        if fn is None or getattr(fn, _CACHE, None) is not None:
            continue  # already resolved (torch's or ours)
        setattr(fn, _CACHE, _lazy_disabled(fn, bool(recursive)))
        count += 1
    return count + _defer_step_graph_breaks(modules)


@contextlib.contextmanager
def ddp_without_compiler() -> Iterator[None]:
    """Construct torch's DDP inside this block without importing ``torch._dynamo`` for it."""
    if "torch._dynamo" in sys.modules:
        yield  # a user (or torch.compile) configured it: torch's DDP reads the real setting
        return
    import torch.nn.parallel.distributed as torch_ddp

    defer_dynamo_imports([torch_ddp])  # _inside_ddp_forward's "disable dynamo" wrapper, lazily
    default_mode = SimpleNamespace(utils=SimpleNamespace(get_optimize_ddp_mode=lambda: "ddp_optimizer"))
    torch._dynamo = default_mode  # type: ignore[assignment]  # torch.__getattr__ would import it
    try:
        yield
    finally:
        if torch.__dict__.get("_dynamo") is default_mode:  # an import meanwhile put the real one there
            del torch._dynamo  # type: ignore[attr-defined]


def _defer_step_graph_breaks(modules: Iterable[Any]) -> int:
    """Give every optimizer class whose ``step`` is torch's ``_use_grad_for_differentiable``
    wrapper (it imports ``torch._dynamo`` on every call, for two graph breaks) a lazy one;
    returns how many classes changed. The profiler hook torch adds around ``step`` is kept."""
    use_grad = getattr(sys.modules.get("torch.optim.optimizer"), "_use_grad_for_differentiable", None)
    if use_grad is None:
        return 0
    code = use_grad(lambda self: None).__code__
    count = 0
    for module in modules:
        for cls in list(vars(module).values()):
            if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and "step" in vars(cls)):
                continue
            step = vars(cls)["step"]
            hooked = getattr(step, "hooked", False)
            inner = step.__wrapped__ if hooked else step  # the profiler hook's ``functools.wraps``
            if getattr(inner, "__code__", None) is not code:
                continue
            lazy = _lazy_use_grad(inner)
            cls.step = cls.profile_hook_step(lazy) if hooked else lazy  # type: ignore[method-assign]
            if hooked:
                cls.step.hooked = True  # type: ignore[attr-defined]
            count += 1
    return count


def _lazy_use_grad(use_grad: Callable[..., Any]) -> Callable[..., Any]:
    """torch's ``_use_grad`` without its two ``torch._dynamo.graph_break()`` calls (no-ops in
    eager mode) while ``torch._dynamo`` is not imported; torch's own wrapper once it is."""
    step = use_grad.__wrapped__

    @functools.wraps(step)
    def _use_grad(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" in sys.modules:
            return use_grad(self, *args, **kwargs)
        previous = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            return step(self, *args, **kwargs)
        finally:
            torch.set_grad_enabled(previous)

    return _use_grad


def _lazy_disabled(fn: Callable[..., Any], recursive: bool) -> Callable[..., Any]:
    """``fn`` itself until ``torch._dynamo`` is imported; from then on torch's disabled ``fn``."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:
            return fn(*args, **kwargs)
        disabled = sys.modules["torch._dynamo"].disable(fn, recursive, wrapping=False)
        setattr(fn, _CACHE, disabled)  # what torch's wrapper would have cached
        return disabled(*args, **kwargs)

    return call


def _disable_dynamo_code() -> Any:
    """The code object of torch's lazy wrapper (None if this torch has no such wrapper)."""
    make = getattr(getattr(torch, "_compile", None), "_disable_dynamo", None)
    if make is None:
        return None
    probe = make(lambda: None)
    code = getattr(probe, "__code__", None)
    return code if code is not None and "fn" in code.co_freevars else None


def _candidates(modules: Iterable[Any]) -> Iterable[Any]:
    """Functions of ``modules``, methods of their classes, and the functions those wrap or close
    over (an optimizer's functional step is ``maybe_fallback`` around a disabled function)."""
    seen: set[int] = set()
    stack: list[Any] = []
    for root in modules:
        for value in list(vars(root).values()):
            stack.extend(vars(value).values() if isinstance(value, type) else [value])
    while stack:
        item = stack.pop()
        member = getattr(item, "__func__", item)  # staticmethod/classmethod/bound method: its function
        if not callable(member) or isinstance(member, type) or id(member) in seen:
            continue
        seen.add(id(member))
        yield member
        stack.append(getattr(member, "__wrapped__", None))
        stack.extend(_cell(c) for c in getattr(member, "__closure__", None) or ())


def _dispatch_modes() -> list[type]:
    """Every ``TorchDispatchMode`` subclass defined so far: torch wraps each one's
    ``__torch_dispatch__`` (our FLOP counter's, the keyed dropout's) in ``_disable_dynamo``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    found, stack = [], list(TorchDispatchMode.__subclasses__())
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None
