"""Tests are not libraries: no module under tests/ imports a ``tests.`` module but ``tests.helpers``.

Run: ``.venv/bin/python -m pytest tests/test_test_imports.py -q`` (fast: files are parsed with
``ast``, nothing is imported). Why: a test module imported for its helpers drags its fixtures,
marks and module-level setup along, and an edit to one test silently changes others; what
tests share lives in tests/helpers/, one module per concern (pytest's conftest.py needs no
import). Absolute (``from tests.training.test_trainer import cli``, ``import tests.x``) and
relative (``from .test_stop import LONG``, ``from . import test_stop``) imports are checked, at
any depth of the file (a function's own import too).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import REPO

ALLOWED = "tests.helpers"


def _allowed(module: str) -> bool:
    return (
        module == ALLOWED or module.startswith(ALLOWED + ".") or not (module == "tests" or module.startswith("tests."))
    )


def _imported(node: ast.Import | ast.ImportFrom, package: list[str]) -> list[str]:
    """The absolute names of the modules (or module members) ``node`` imports, in a file of ``package``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        base = node.module or ""
    else:  # relative: level 1 is the file's own package, each further dot one package up
        parents = package[: len(package) - (node.level - 1)]
        base = ".".join(parents + ([node.module] if node.module else []))
    if node.module is None or base == "tests":  # ``from . import x``, ``from tests import x``: x is a module
        return [f"{base}.{alias.name}" for alias in node.names]
    return [base]


def violations(root: Path) -> list[str]:
    """``path:line: imports MODULE ...`` for every import of a non-helper ``tests.`` module under ``root/tests``."""
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        rel = path.relative_to(root)
        package = list(rel.parent.parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for module in _imported(node, package):
                if not _allowed(module):
                    found.append(
                        f"{rel}:{node.lineno}: imports {module}; move what it needs into tests/helpers/ "
                        "and import it from there"
                    )
    return found


def test_no_test_module_imports_another():
    found = violations(REPO)
    assert not found, "test modules used as libraries:\n" + "\n".join(found)


def test_a_synthetic_violation_is_named_by_file_and_line(tmp_path):
    tests = tmp_path / "tests"
    (tests / "helpers").mkdir(parents=True)
    (tests / "training").mkdir()
    (tests / "helpers" / "runs.py").write_text("from .paths import REPO\nfrom tests.helpers import paths\n")
    (tests / "training" / "test_ok.py").write_text(
        "import os\nfrom tests.helpers.cli import cli\nfrom tests import helpers\nfrom ..helpers import runs\n"
        "import tests.helpers.paths\nfrom neural_arch.cli import main\n"
    )
    (tests / "training" / "test_bad.py").write_text(
        "import json\n"
        "from tests.training.test_ok import cli\n"  # 2: absolute, another test module
        "import tests.training.test_ok\n"  # 3: plain import
        "from .test_ok import cli as again\n"  # 4: relative, same package
        "from . import test_ok\n"  # 5: relative, the module itself
        "from tests import conftest\n"  # 6: only helpers are importable
        "\n"
        "def test_x():\n"
        "    from ..training.test_ok import helpers\n"
    )  # 9: inside a function, two dots
    assert violations(tmp_path) == [
        f"tests/training/test_bad.py:{line}: imports {module}; move what it needs into tests/helpers/ and import it "
        "from there"
        for line, module in [
            (2, "tests.training.test_ok"),
            (3, "tests.training.test_ok"),
            (4, "tests.training.test_ok"),
            (5, "tests.training.test_ok"),
            (6, "tests.conftest"),
            (9, "tests.training.test_ok"),
        ]
    ]
