"""Dataclasses from plain YAML data, driven by their type annotations; one-line errors.

Used by config.py: ``build(Config, raw_dict, "")`` checks every key against the
dataclass fields (unknown names get a "did you mean"), converts and type-checks values
(int, float, bool, str, Literal choices, Optional, fixed tuples, lists, nested dataclasses)
and raises ``ConfigError`` naming the key path and the bad value.

A setting with a closed set of values is a ``Literal[...]`` (or ``Optional[Literal[...]]``) field:
its value is checked here, generically, with one line naming the key, the value, every allowed
value and the closest one; no section needs a hand-written check of its choices.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
import types
import typing
from typing import Any, Callable, Literal, Sequence, Union


def at_least(lo: int) -> tuple[Callable[[Any], bool], str]:
    """A range rule: ``value >= lo``."""
    return (lambda v: v >= lo), f">= {lo}"


POSITIVE = (lambda v: v > 0), "> 0"
UNIT = (lambda v: 0 <= v <= 1), "between 0 and 1"


class ConfigError(ValueError):
    """A configuration mistake; the message is one line the CLI can print as is."""

    def __init__(self, message: str):
        super().__init__(str(message).replace("\n", " "))


def build(cls: Any, data: Any, prefix: str) -> Any:
    data = {} if data is None else data  # "training:" with nothing under it means defaults
    if not isinstance(data, dict):
        raise ConfigError(
            f"{prefix}: expected a mapping with keys ({', '.join(names(cls))}), "
            f"got {show(data)} ({type(data).__name__})"
        )
    hints, kwargs = typing.get_type_hints(cls), {}
    for name, value in data.items():
        if name not in hints:
            unknown(prefix, name, cls)
        kwargs[name] = _convert(value, hints[name], f"{prefix}.{name}" if prefix else name)
    return cls(**kwargs)


def _convert(value: Any, tp: Any, key: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if origin is Literal:
        if isinstance(value, str) and value in args:
            return value
        raise _type_error(key, value, tp)
    if origin in (Union, types.UnionType):  # the first alternative that takes the value wins
        if value is None and type(None) in args:
            return None
        for alternative in (a for a in args if a is not type(None)):
            try:
                return _convert(value, alternative, key)
            except ConfigError:
                pass
        raise _type_error(key, value, tp)  # say "X or Y or null", not just the last one
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise _type_error(key, value, tp)
        return tuple(_convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is list:  # any length
        if not isinstance(value, (list, tuple)) or not value:
            raise _type_error(key, value, tp)
        return [_convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        # PyYAML (YAML 1.1) reads 1e-3 as the text "1e-3", so numeric text is accepted too;
        # .inf/.nan are refused because no setting here means anything with them.
        try:
            number = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None or not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite float, got {show(value)} ({type(value).__name__})")
        return number
    # bool is a subclass of int, but "steps: true" is a mistake, not 1.
    if isinstance(value, tp) and not (isinstance(value, bool) and tp is not bool):
        return value
    raise _type_error(key, value, tp)


def _type_error(key: str, value: Any, tp: Any) -> ConfigError:
    """One line: the key, the value and what ``tp`` allows (for a choice, the closest one)."""
    if typing.get_origin(tp) is Literal:
        return ConfigError(f"{key}: got {show(value)}, expected {_type_name(tp)}{hint(value, typing.get_args(tp))}")
    return ConfigError(
        f"{key}: expected {_type_name(tp)}, got {show(value)} ({type(value).__name__}){hint(value, _choices(tp))}"
    )


def _choices(tp: Any) -> list[Any]:
    """The ``Literal`` values among the alternatives of ``tp`` (e.g. ``Optional[Literal["a", "b"]]``)."""
    return [c for a in typing.get_args(tp) if typing.get_origin(a) is Literal for c in typing.get_args(a)]


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin is tuple:
        return f"a list of {len(args)} values ({', '.join(_type_name(a) for a in args)})"
    if origin is list:
        return f"a non-empty list of {_type_name(args[0])}"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    return getattr(tp, "__name__", str(tp))


def names(cls: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def unknown(prefix: str, name: Any, cls: Any) -> None:
    what, full, known = ("key", f"{prefix}.{name}", names(cls)) if prefix else ("section", str(name), names(cls))
    raise ConfigError(f"unknown {what} {full!r}{hint(name, known, prefix)}; known {what}s: {', '.join(known)}")


def hint(value: Any, choices: Sequence[Any], prefix: str = "") -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(value, [str(c) for c in choices], n=1) if isinstance(value, str) else []
    return f" (did you mean {(prefix + '.' if prefix else '') + close[0]!r}?)" if close else ""


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 6, 6, 6


def show(value: Any) -> str:
    """A value as written in YAML (null/true, not None/True), cut short so errors stay one line.
    Never the whole value: ``reprlib`` stops after a few items and levels, so a huge or
    deeply shared value costs no more to show than a small one."""
    if isinstance(value, tuple):
        value = list(value)
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else _SHORT.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
