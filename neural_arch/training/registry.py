"""Task registry: the name in ``run.task`` -> the ``Task`` class that trains it.

Use::

    from neural_arch.training.registry import register_task, task_class
    register_task("toy", ToyTask)          # then run.task: toy (in this process)
    task_class(cfg.run.task)               # a built-in application is imported on first use

A name resolves, in this order, to: a class registered in this process; an installed
package's entry point in the ``neural_arch.tasks`` group; or, when it has the form
``package.module:ClassName``, that class imported from that module. The built-in
applications are entry points too, declared in pyproject.toml like any other package's
(``pip install -e .`` registers them), so the framework imports nothing from
``neural_arch.apps``. The last two work in every worker process without any code, so a
job started by a launcher, srun or mpirun finds the same task on every rank. Applications
are imported only when named.
"""

from __future__ import annotations

import importlib
import re
from importlib.metadata import entry_points
from typing import Any

from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError, hint

ENTRY_POINT_GROUP = "neural_arch.tasks"
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_registered: dict[str, type[Task]] = {}


def register_task(name: str, cls: type[Task]) -> None:
    """Make ``run.task: NAME`` train with ``cls`` in this process (re-registering replaces)."""
    if not isinstance(cls, type) or not issubclass(cls, Task):
        raise TypeError(
            f"register_task({name!r}, ...): expected a subclass of neural_arch.training.task.Task, got {cls!r}"
        )
    _registered[name] = cls


def known_tasks() -> list[str]:
    """Every name ``task_class`` accepts without the ``module:Class`` form."""
    installed = [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)]
    return sorted({*_registered, *installed})


def task_class(name: str, *, allow_import: bool = True) -> type[Task]:
    """The ``Task`` subclass for ``name``; ``ConfigError`` naming the known tasks if none.

    ``allow_import=False`` for a name read from a file someone else may have written (a
    checkpoint's ``run.task``): only registered tasks and installed entry points resolve, so
    a ``module:Class`` shipped beside a downloaded run never runs its top-level code.
    """
    if not isinstance(name, str):
        raise ConfigError(
            f"run.task is a {type(name).__name__}, expected a task name (registered, an entry point, or module:Class)"
        )
    if name in _registered:
        return _registered[name]
    installed = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if installed:
        return _checked(name, installed[0].load())
    if ":" in name and not allow_import:
        raise ConfigError(
            f"run.task={_shown(name)} is not a registered task or installed entry point, and a name read from a "
            "checkpoint is never imported (it could run any code); if you trust that module, name it yourself "
            f"with --task {_shown(name)}"
        )
    if ":" in name:
        return _checked(name, _import(name, name))
    raise ConfigError(_unknown(name, known_tasks()))


def _shown(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 120 else text[:117] + "..."


def _unknown(name: str, known: list[str]) -> str:
    """What was asked, what is installed, and the ways to make the name known."""
    if not known:  # the usual cause: running from a source tree that was never pip-installed
        found = (
            f"no tasks are installed (the {ENTRY_POINT_GROUP!r} entry-point group is empty): install "
            "neural_arch (pip install -e . in its checkout) to register the built-in apps"
        )
    else:
        found = f"installed tasks: {', '.join(known)}"
    return (
        f"run.task={_shown(name)} is not a known task{hint(name, known)}; {found}; to add one, install the package "
        f"that declares it as a {ENTRY_POINT_GROUP!r} entry point, call register_task, or give your own as "
        "'package.module:TaskClass'"
    )


def _import(target: str, name: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not (_MODULE.fullmatch(module_name) and attr.isidentifier()):  # e.g. ../../x:y, a path, not a module
        raise ConfigError(
            f"run.task={_shown(name)} is not 'package.module:TaskClass' (dotted Python names, no paths); "
            "put the module on PYTHONPATH and name it by its import name"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the module exists but one of its own imports failed: a bug to show with its traceback
        raise ConfigError(
            f"run.task={name!r}: cannot import module {module_name!r} ({exc}); is it installed or on PYTHONPATH?"
        ) from None
    if not hasattr(module, attr):
        raise ConfigError(f"run.task={name!r}: module {module_name!r} has no attribute {attr!r}")
    return getattr(module, attr)


def _checked(name: str, found: Any) -> type[Task]:
    if not (isinstance(found, type) and issubclass(found, Task)):
        raise ConfigError(
            f"run.task={name!r} names {found!r}, which is not a subclass of neural_arch.training.task.Task"
        )
    return found
