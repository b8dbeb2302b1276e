"""Task registry: the name in ``run.task`` -> the ``Task`` class that trains it.

Use::

    from neural_arch.training.registry import register_task, task_class
    register_task("toy", ToyTask)          # then run.task: toy (in this process)
    task_class(cfg.run.task)               # a built-in application is imported on first use

A name resolves, in this order, to: a class registered in this process; a built-in
application (``neural_arch.apps.BUILTIN_TASKS``); an installed package's entry point in the
``neural_arch.tasks`` group; or, when it has the form ``package.module:ClassName``, that
class imported from that module. The last two work in every worker process without any
code, so a job started by a launcher, srun or mpirun finds the same task on every rank.
Applications are imported only when named, so the framework imports none of them.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from neural_arch.apps import BUILTIN_TASKS
from neural_arch.training.task import Task
from neural_arch.training.typed_config import ConfigError, hint

ENTRY_POINT_GROUP = "neural_arch.tasks"
_registered: dict[str, type[Task]] = {}


def register_task(name: str, cls: type[Task]) -> None:
    """Make ``run.task: NAME`` train with ``cls`` in this process (re-registering replaces)."""
    if not isinstance(cls, type) or not issubclass(cls, Task):
        raise TypeError(f"register_task({name!r}, ...): expected a subclass of neural_arch.training.task.Task, got {cls!r}")
    _registered[name] = cls


def known_tasks() -> list[str]:
    """Every name ``task_class`` accepts without the ``module:Class`` form."""
    installed = [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)]
    return sorted({*_registered, *BUILTIN_TASKS, *installed})


def task_class(name: str) -> type[Task]:
    """The ``Task`` subclass for ``name``; ``ConfigError`` naming the known tasks if none."""
    if name in _registered:
        return _registered[name]
    if name in BUILTIN_TASKS:
        return _checked(name, _import(BUILTIN_TASKS[name], name))
    installed = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if installed:
        return _checked(name, installed[0].load())
    if ":" in name:
        return _checked(name, _import(name, name))
    known = known_tasks()
    raise ConfigError(f"run.task={name!r} is not a known task{hint(name, known)}; known tasks: {', '.join(known)}; "
                      "or give your own as 'package.module:TaskClass'")


def _import(target: str, name: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the module exists but one of its own imports failed: a bug to show with its traceback
        raise ConfigError(f"run.task={name!r}: cannot import module {module_name!r} ({exc}); is it installed "
                          "or on PYTHONPATH?") from None
    if not hasattr(module, attr):
        raise ConfigError(f"run.task={name!r}: module {module_name!r} has no attribute {attr!r}")
    return getattr(module, attr)


def _checked(name: str, found: Any) -> type[Task]:
    if not (isinstance(found, type) and issubclass(found, Task)):
        raise ConfigError(f"run.task={name!r} names {found!r}, which is not a subclass of "
                          "neural_arch.training.task.Task")
    return found
