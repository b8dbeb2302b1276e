"""YAML for config files, with limits: ``yaml.safe_load`` plus no alias bombs, no duplicate
keys, no huge strings.

Use: ``data = load_yaml(text)`` (``yaml.YAMLError`` with a mark on a mistake, as PyYAML's own).

Why: ``safe_load`` runs no code, but a 300-byte file whose aliases nest (``a: &a [x, x]``,
``b: &b [*a, *a]``, ...) stands for billions of values; building, checking or printing it
exhausts memory. ``BoundedLoader`` counts what the aliases expand to before anything is
constructed and refuses past ``MAX_VALUES``; a recursive alias is refused the same way. A
key given twice in one mapping is an error (PyYAML keeps the last silently, so a typo'd
copy hides the setting above it); keys merged in with ``<<`` may still be overridden.
Strings are capped at ``MAX_STRING`` characters, since a config value is copied into every
checkpoint and log.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_VALUES = 100_000
"""Values a config may expand to through its aliases (the largest shipped config has ~100)."""
MAX_STRING = 10_000
"""Characters in one config string (paths and names are far shorter)."""
_MERGE = "tag:yaml.org,2002:merge"


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses alias bombs, duplicate keys and huge strings."""

    def construct_document(self, node: Node) -> Any:
        _expanded_size(node)
        return super().construct_document(node)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> Any:
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE or not isinstance(key_node, ScalarNode):
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"duplicate key {_short(key)} (first given on line {seen[key].start_mark.line + 1}); keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """The value of one YAML document, read with ``BoundedLoader``."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError:
        raise
    except (ValueError, TypeError, OverflowError, AttributeError, KeyError, IndexError) as exc:
        # a tag PyYAML cannot build: !!float x, !!binary ~, "!!timestamp 2001-12-14\nrun:null" (AttributeError)
        raise ConstructorError(None, None, f"a tagged value that cannot be built ({_short(str(exc))})") from None


def _expanded_size(root: Node) -> int:
    """How many values ``root`` stands for with every alias expanded; ``ConstructorError`` past
    ``MAX_VALUES``, for a recursive alias, or for a string over ``MAX_STRING``. Each distinct
    node is visited once (sizes are memoized), so a bomb costs its size in the file, not its expansion."""
    sizes: dict[int, int] = {}
    pending: list[tuple[Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while pending:  # iterative: a deeply nested file must not exhaust Python's stack
        node, children_done = pending.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if not children_done:
            if key in open_nodes:
                raise ConstructorError(None, None, "a recursive alias (a value that contains itself)", node.start_mark)
            if isinstance(node, ScalarNode) and len(node.value) > MAX_STRING:
                raise ConstructorError(
                    None,
                    None,
                    f"a string of {len(node.value)} characters, over the {MAX_STRING} allowed",
                    node.start_mark,
                )
            open_nodes.add(key)
            pending.append((node, True))
            pending += [(child, False) for child in children if id(child) not in sizes]
            continue
        open_nodes.discard(key)
        sizes[key] = 1 + sum(sizes[id(child)] for child in children)
        if sizes[key] > MAX_VALUES:
            raise ConstructorError(
                None,
                None,
                f"its aliases expand to more than {MAX_VALUES} values (an alias bomb?); write the values out",
                node.start_mark,
            )
    return sizes[id(root)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
