"""A package ``__init__`` that imports its public names on first use (PEP 562).

Use, in a package's ``__init__.py``::

    _WHERE = {"LaunchConfig": "config", "main": "launch"}   # public name -> its module
    __getattr__ = lazy_getattr(__name__, _WHERE, globals())

Why: a package that imports everything it exports makes its lightest submodule as slow to
import as its heaviest (``neural_arch.distributed.launcher.args`` would load torch elastic, seconds
on a busy machine, for ``--help``). Type checkers do not see these names: import them under
``typing.TYPE_CHECKING`` as well.
"""

from __future__ import annotations

import importlib
from typing import Callable, Collection, Mapping


def lazy_getattr(
    package: str, where: Mapping[str, str], namespace: dict[str, object], submodules: Collection[str] = ()
) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: a name of ``where`` comes from
    ``package.<where[name]>`` and is kept in ``namespace`` (the package's globals) so it is looked
    up once; a name of ``submodules`` is that subpackage, imported; anything else AttributeError."""

    def __getattr__(name: str) -> object:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        namespace[name] = value  # later lookups skip this function
        return value

    return __getattr__
