"""Run by ``mkdocs build`` (mkdocs.yml ``hooks:``): writes the config reference into docs/config.md.

Every key of every section, with its type, default and docstring: the line ``<!-- config-keys -->`` in docs/config.md is
replaced at build time by one table per section, read from the dataclasses themselves (the
framework's sections and the ``model:``/``data:`` sections of every installed task), so the
page cannot drift from the code. tests/test_docs_config.py checks with ``field_docs`` that
every field has a docstring. To print the generated Markdown: ``python docs/hooks/config_keys.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from importlib.metadata import entry_points
from typing import Any, Literal, Optional, Union

MARKER = "<!-- config-keys -->"
PAGE = "config.md"


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the string literal written right after it in the class body ('' if none)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            text = after.value.value if is_doc and isinstance(after.value.value, str) else ""
            docs[node.target.id] = " ".join(inspect.cleandoc(text).split())
    return docs


def sections() -> list[tuple[str, Optional[str], type]]:
    """(section, task, dataclass) for every section: the task is None for the framework's own
    sections, and the app sections (``model``, ``data``) come once per installed task."""
    from neural_arch.training.config import Config
    from neural_arch.training.registry import task_class

    hints = typing.get_type_hints(Config)
    tasks = sorted(ep.name for ep in entry_points(group="neural_arch.tasks"))
    found = []
    for section in (f.name for f in dataclasses.fields(Config)):
        if section in ("model", "data"):
            for name in tasks:
                found.append((section, name, getattr(task_class(name).SECTIONS, section)))
        else:
            found.append((section, None, hints[section]))
    return found


def type_text(tp: Any) -> str:
    """A type as a config author reads it: ``int``, ``float or null``, ``one of sgd, adam``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else type_text(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is tuple:
        return "[" + ", ".join(type_text(a) for a in args) + "]"
    if origin is list:
        return f"list of {type_text(args[0])}"
    return getattr(tp, "__name__", str(tp))


def value_text(value: Any) -> str:
    """A default as written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    return str(value)


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()  # type: ignore[misc]


def section_table(section: str, cls: type, rules: dict[str, tuple]) -> str:
    """The Markdown table of one section: key, type, default, description (and allowed values)."""
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        key = f"{section}.{f.name}"
        text = docs[f.name] + (f" Allowed: {rules[key][1]}." if key in rules else "")
        cells = [f"`{key}`", type_text(hints[f.name]), f"`{value_text(default_of(f))}`", text]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def reference() -> str:
    """The generated Markdown: one heading, the section's docstring and its table per section."""
    from neural_arch.training import config as config_module
    from neural_arch.training.config import Config
    from neural_arch.training.registry import task_class

    summary = field_docs(Config)
    framework_rules = getattr(config_module, "_RANGES", {})
    parts = []
    for section, task, cls in sections():
        if task is None:
            parts += [f"## `{section}:` {{#{section}}}", "", summary[section], ""]
            parts += [section_table(section, cls, framework_rules), ""]
            continue
        if f"{{#{section}}}" not in "\n".join(parts):  # the first application's: the section's heading
            parts += [f"## `{section}:` {{#{section}}}", "", summary[section], ""]
        source = cls.__module__.replace(".", "/") + ".py"
        parts += [f"### `run.task: {task}` {{#{section}-{task}}}", "", f"`{cls.__name__}` in `{source}`.", ""]
        parts += [section_table(section, cls, {**framework_rules, **task_class(task).SECTIONS.ranges}), ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost the line {MARKER}, where the generated config reference goes")
    return markdown.replace(MARKER, reference())


if __name__ == "__main__":
    print(reference())
