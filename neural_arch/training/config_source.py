"""Where a config's raw values come from: a YAML file and ``--set section.key=value`` overrides.

Use (``load_config`` in config.py does this)::

    raw = read_yaml(Path("configs/tiny.yaml"), Config)        # {"optim": {"lr": 0.1}, ...}
    apply_override(raw, "training.steps=50", sections, Config)  # checked key path, YAML value

Both produce the plain nested dict that ``typed_config.build`` then checks field by field;
``root`` is the top-level dataclass (``Config``), passed in so this module needs nothing of
config.py. Every mistake is a one-line ``ConfigError`` naming the file position or key.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Sequence

import yaml

from neural_arch.training.config_yaml import MAX_STRING, load_yaml
from neural_arch.training.typed_config import ConfigError, names, show, unknown
from neural_arch.utils.safe_files import read_regular

MAX_CONFIG_BYTES = 1 << 20
"""A config file's size limit (the shipped ones are a few KiB)."""


def read_yaml(path: Path, root: type) -> dict:
    """The file's top-level mapping of sections (an empty file: all defaults)."""
    try:
        data = load_yaml(read_regular(path, MAX_CONFIG_BYTES, follow=True).decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); save it as UTF-8"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply; a config is a few levels of mappings") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(e, 'problem', None) or e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of sections "
            f"({', '.join(names(root))}), got {show(data)} ({type(data).__name__})"
        )
    return data


def apply_override(raw: dict, text: str, sections: dict[str, type], root: type) -> None:
    """Set one ``section.key=value`` into the raw nested dict; the key path is checked first."""
    key, sep, value_text = str(text).partition("=")
    section, dot, name = key.strip().partition(".")
    if not (sep and dot and section and name):
        raise ConfigError(f"malformed override {show(text)}: expected section.key=value, e.g. optim.lr=0.1")
    if len(value_text) > MAX_STRING:
        raise ConfigError(
            f"--set {key.strip()}: a value of {len(value_text)} characters, over the {MAX_STRING} allowed"
        )
    if section not in sections:
        unknown("", section, root)
    cls = sections[section]
    if name not in names(cls):
        unknown(section, name, cls)
    tp = typing.get_type_hints(cls)[name]
    try:
        value = load_yaml(value_text) if value_text.strip() else None
    except RecursionError:
        raise ConfigError(f"--set {key.strip()}: the value is nested too deeply") from None
    except yaml.YAMLError:
        value = value_text  # not YAML (e.g. "a: b: c"); the type check rejects it where wrong
    # A str field takes the text verbatim: run.name=2024 is a name, not the int 2024 (a
    # list or mapping still goes to a field that may also hold a list, e.g. str | list[str]).
    if value is not None and not isinstance(value, (str, list, dict)) and str in (tp, *typing.get_args(tp)):
        value = value_text.strip()
    if raw.get(section) is None:
        raw[section] = {}
    if not isinstance(raw[section], dict):
        raise ConfigError(f"{section}: expected a mapping, got {show(raw[section])}; cannot apply --set {key}")
    raw[section][name] = value


def task_name(raw: dict, overrides: Sequence[str], default: str) -> str:
    """``run.task`` as the file and the overrides set it (the last override wins; ``default`` if neither)."""
    run = raw.get("run")
    name = run.get("task", default) if isinstance(run, dict) else default  # a bad run: is reported by build
    for text in overrides:
        key, sep, value = str(text).partition("=")
        if sep and key.strip() == "run.task":
            name = value.strip()
    if not isinstance(name, str):
        raise ConfigError(f"run.task: expected a task name (str), got {show(name)}")
    return name
