"""Check the package layout rules (docs/architecture.md) statically (stdlib only, no torch needed).

Run: ``python tools/check_layout.py [neural_arch]`` (default: ``neural_arch/``).
Exits 1 listing one violation per line as ``path:line: what is wrong (limit)``; exits 0
with a one-line summary otherwise. Checks:

- import cycles among the package's modules, counting imports inside functions too (a
  lazy import only postpones a cycle to the first call; it still ties the two modules
  together, so the shared piece belongs in a module of its own) and ignoring imports
  under ``if TYPE_CHECKING:`` (never run, only read by type checkers);
- files longer than 300 physical lines; functions/methods longer than 60 lines
  (``def`` line to last line, decorators excluded);
- model files (``apps/<name>/model.py``, ``models*.py``) never import
  ``<pkg>.distributed`` or ``torch.distributed``;
- the framework (``distributed/``, ``training/``, ``cli/``) imports nothing from
  ``<pkg>.apps`` (neither ``<pkg>.apps`` itself nor ``<pkg>.apps.<name>``), in functions
  too: the built-in apps reach it as ``neural_arch.tasks`` entry points, like any other.

Import graph: ``import a.b.c`` and ``from a.b import c`` run the ``__init__`` of every
parent package, so they count as imports of those parents too -- except parents that
are ancestors of the importing module itself: Python has already started running them,
so ``pkg/__init__`` re-exporting ``pkg.sub`` while ``pkg.sub`` imports ``pkg.other`` is
not a cycle. Importing a name from a package (``from pkg import helper``) is an explicit
import of ``pkg/__init__`` and does count.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import sys
from collections import deque
from pathlib import Path

MAX_FILE_LINES = 300
MAX_FUNCTION_LINES = 60
FRAMEWORK_DIRS = ("distributed", "training", "cli")


class Module:
    """One source file: its dotted name, path, parsed tree and collected imports."""

    def __init__(self, name: str, path: Path, is_pkg: bool):
        self.name, self.path, self.is_pkg = name, path, is_pkg
        self.text = path.read_text(encoding="utf-8", errors="replace")
        self.tree: ast.Module | None = None
        # (line, base module or None, imported names or None, level, type_checking)
        self.imports: list[tuple[int, str | None, list[str] | None, int, bool]] = []


def discover(root: Path) -> dict[str, Module]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts:
            continue
        parts = [root.name, *rel.parts[:-1]]
        is_pkg = rel.name == "__init__.py"
        if not is_pkg:
            parts.append(rel.stem)
        modules[".".join(parts)] = Module(".".join(parts), path, is_pkg)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def collect_imports(mod: Module, node: ast.AST, tc: bool = False) -> None:
    """Record every import under ``node`` (in functions too), flagged if under TYPE_CHECKING."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            mod.imports.append((node.lineno, alias.name, None, 0, tc))
    elif isinstance(node, ast.ImportFrom):
        names = [alias.name for alias in node.names]
        mod.imports.append((node.lineno, node.module, names, node.level, tc))
    elif isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.body:
            collect_imports(mod, child, True)
        for child in node.orelse:
            collect_imports(mod, child, tc)
    else:
        for child in ast.iter_child_nodes(node):
            collect_imports(mod, child, tc)


def resolve(mod: Module, base: str | None, names: list[str] | None, level: int, known: dict[str, Module]) -> list[str]:
    """Absolute names an import statement refers to (modules where known, else the base)."""
    if level:
        pkg = mod.name if mod.is_pkg else mod.name.rpartition(".")[0]
        parts = pkg.split(".")
        if level - 1 >= len(parts):
            return []
        pkg = ".".join(parts[: len(parts) - (level - 1)])
        base = f"{pkg}.{base}" if base else pkg
    if names is None:
        return [base]
    targets = []
    for name in names:
        full = f"{base}.{name}"
        # External packages: both readings, so ``from torch import distributed`` is caught.
        targets += [full] if full in known else [base] if base in known else [base, full]
    return targets


def graph_edges(mod: Module, known: dict[str, Module]) -> dict[str, int]:
    """Import edges from ``mod`` to package modules (function-level ones included), with the first line."""
    own_ancestors = {mod.name.rsplit(".", i)[0] for i in range(mod.name.count(".") + 1)}
    edges: dict[str, int] = {}
    for line, base, names, level, tc in mod.imports:
        if tc:
            continue
        for target in resolve(mod, base, names, level, known):
            parts = target.split(".")
            implied = {".".join(parts[:i]) for i in range(1, len(parts))} - own_ancestors
            for dest in {target, *implied}:
                if dest != mod.name and dest in known:
                    edges.setdefault(dest, line)
    return edges


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm (recursive; package graphs are small)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            result.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return result


def shortest_cycle(graph: dict[str, dict[str, int]], start: str, allowed: set[str]) -> list[str]:
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node]):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if nxt in allowed and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return []


def check_cycles(modules: dict[str, Module]) -> list[str]:
    """One line per distinct cycle: the shortest cycle through each module of each SCC."""
    graph = {name: graph_edges(mod, modules) for name, mod in modules.items()}
    cycles = set()
    for component in strongly_connected(graph):
        for start in component if len(component) > 1 else []:
            cycle = shortest_cycle(graph, start, set(component))
            first = cycle.index(min(cycle))
            cycles.add(tuple(cycle[first:] + cycle[:first]))
    problems = []
    for cycle in sorted(cycles):
        chain = " -> ".join([*cycle, cycle[0]])
        line = graph[cycle[0]][cycle[1]]
        problems.append(
            f"{modules[cycle[0]].path}:{line}: import cycle {chain} "
            "(limit: no import cycles, imports inside functions included)"
        )
    return problems


def check_sizes(mod: Module, stats: dict) -> list[str]:
    problems = []
    n_lines = len(mod.text.splitlines())
    stats["files"] += 1
    stats["largest"] = max(stats["largest"], (n_lines, str(mod.path)))
    if n_lines > MAX_FILE_LINES:
        problems.append(f"{mod.path}:1: file has {n_lines} lines (limit {MAX_FILE_LINES})")

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = child.end_lineno - child.lineno + 1
                stats["functions"] += 1
                where = f"{mod.path}:{child.lineno}"
                stats["longest"] = max(stats["longest"], (length, f"{where} {name}"))
                if length > MAX_FUNCTION_LINES:
                    problems.append(f"{where}: function {name} has {length} lines (limit {MAX_FUNCTION_LINES})")
            walk(child, f"{name}." if name != prefix else prefix)

    walk(mod.tree, "")
    return problems


def check_import_rules(mod: Module, root: Path, modules: dict[str, Module]) -> list[str]:
    rel = mod.path.relative_to(root).parts
    pkg = root.name
    in_app = len(rel) >= 3 and rel[0] == "apps"
    is_model = in_app and (rel[-1] == "model.py" or fnmatch.fnmatch(rel[-1], "models*.py"))
    is_framework = rel[0] in FRAMEWORK_DIRS or rel[0] == "cli.py"
    problems = []
    for line, base, names, level, _tc in mod.imports:
        for target in resolve(mod, base, names, level, modules):
            if is_model and any(
                target == f or target.startswith(f + ".") for f in (f"{pkg}.distributed", "torch.distributed")
            ):
                problems.append(
                    f"{mod.path}:{line}: model file imports {target} (limit: model "
                    "files never import neural_arch.distributed or torch.distributed;"
                    " parallelism is applied from outside)"
                )
            if is_framework and (target == f"{pkg}.apps" or target.startswith(f"{pkg}.apps.")):
                problems.append(
                    f"{mod.path}:{line}: framework module imports {target} (limit: "
                    "distributed/, training/, cli/ import nothing from apps/; an app is "
                    "found by its task name in the neural_arch.tasks entry points)"
                )
    return problems


def check(root: Path) -> tuple[list[str], dict]:
    modules = discover(root)
    stats = {"files": 0, "functions": 0, "largest": (0, "-"), "longest": (0, "-")}
    problems = []
    for mod in modules.values():
        try:
            mod.tree = ast.parse(mod.text, filename=str(mod.path))
        except SyntaxError as exc:
            problems.append(f"{mod.path}:{exc.lineno}: syntax error: {exc.msg} (limit: must parse)")
            mod.tree = ast.Module(body=[], type_ignores=[])
        collect_imports(mod, mod.tree)
    for mod in modules.values():
        problems += check_sizes(mod, stats)
        problems += check_import_rules(mod, root, modules)
    problems += check_cycles(modules)
    return list(dict.fromkeys(problems)), stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", help="package directory (default: neural_arch)")
    args = parser.parse_args(argv)
    default = Path("neural_arch")
    if not default.is_dir():
        default = Path(__file__).resolve().parent.parent / "neural_arch"
    root = Path(args.package) if args.package else default
    if not root.is_dir():
        print(
            f"check_layout: {root} is not a directory (expected a package folder, e.g. neural_arch/)", file=sys.stderr
        )
        return 2
    problems, stats = check(root)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_layout: {len(problems)} violation(s) in {root}", file=sys.stderr)
        return 1
    print(
        f"OK: {stats['files']} files, {stats['functions']} functions checked; largest file "
        f"{stats['largest'][1]} ({stats['largest'][0]} lines), longest function "
        f"{stats['longest'][1]} ({stats['longest'][0]} lines)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
