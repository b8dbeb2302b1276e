"""The user-facing Markdown pages and their code blocks, for the documentation tests.

Use: ``for page in PAGES: blocks(page.read_text())``; ``hook("doc_links")`` imports a module of
docs/hooks/ (the mkdocs hooks are not a package, so they are loaded from their path).

The code-block convention (docs pages and README.md): fenced ``python`` and ``bash`` blocks run,
in order, one fresh temporary directory per page. An HTML comment on the line right before the
opening fence changes that: ``<!-- not run: REASON -->`` skips the block (REASON required),
``<!-- file: NAME -->`` writes the block's text to NAME in that directory instead (any
language), and ``<!-- needs: PROGRAM -->`` runs the block where PROGRAM (a real scheduler the
suite can bring up here: ``slurm``, ``mpirun``) is installed and skips it, with the reason, where
it is not. ``sh``, ``shell`` and ``console`` blocks are not used: write ``bash``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Optional

from tests.helpers.paths import REPO

DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
"""Every page the convention covers: README.md and docs/**/*.md."""
RUN = ("python", "bash")
"""Languages whose blocks run."""
REFUSED = ("sh", "shell", "console")
"""Languages the convention leaves out (write bash), so a block never silently goes unrun."""

OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not run|file|needs)\s*:(?P<value>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, first line number (the fence), text and marker."""

    line: int
    lang: str
    text: str
    marker: Optional[str] = None
    """``not run``, ``file`` or ``needs``, from the comment right above the fence; None without one."""
    value: str = ""
    """The marker's reason, file name or program."""


def blocks(text: str) -> list[Block]:
    """The page's fenced blocks in order (nested fences inside a block are its text)."""
    lines, found, index = text.splitlines(), [], 0
    while index < len(lines):
        opening = OPEN.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        end = index + 1
        while end < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[end]):
            end += 1
        body = "".join(_dedent(line, indent) + "\n" for line in lines[index + 1 : end])
        marker = MARKER.match(lines[index - 1]) if index > 0 else None
        kind, value = (marker.group("kind"), marker.group("value").strip()) if marker else (None, "")
        found.append(Block(index + 1, opening.group("lang").lower(), body, kind, value))
        index = end + 1
    return found


def hook(name: str) -> ModuleType:
    """A module of docs/hooks/ imported from its file (its siblings importable, as under mkdocs)."""
    if name in sys.modules:
        return sys.modules[name]
    folder = str(DOCS / "hooks")
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def page_id(page: Path) -> str:
    """The page's path from the repository root (its name, for a page elsewhere)."""
    return page.relative_to(REPO).as_posix() if REPO in page.parents else page.name


def _dedent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip()
