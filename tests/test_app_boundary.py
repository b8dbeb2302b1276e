"""The framework names no application: each app's name appears only in its own folder.

Run: ``.venv/bin/python -m pytest tests/test_app_boundary.py -q``

For every folder ``neural_arch/apps/<name>/``, no Python file of the package outside that
folder mentions ``<name>`` (any case), except the registry of built-in apps,
``neural_arch/apps/__init__.py``, where each app has its one line. The import rules (model
files import no distributed code, the framework imports no app) are checked by
``tools/check_layout.py`` (tests/test_layout.py).
"""

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "neural_arch"
APPS = sorted(p.name for p in (PACKAGE / "apps").iterdir() if (p / "__init__.py").exists())
REGISTRY = PACKAGE / "apps" / "__init__.py"


@pytest.mark.parametrize("app", APPS)
def test_app_is_named_only_in_its_folder_and_the_registry(app):
    outside = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py")) if app not in path.relative_to(PACKAGE).parts[:2]
        for number, line in enumerate(path.read_text().splitlines(), 1) if app in line.lower()
    ]
    elsewhere = [hit for hit in outside if not hit.startswith(str(REGISTRY.relative_to(PACKAGE.parent)))]
    assert not elsewhere, "\n".join(elsewhere)
    assert len(outside) <= 2, "\n".join(outside)  # its registry entry (and the default task's line)


def test_there_are_apps_to_check():
    assert {"icenet", "regression"} <= set(APPS)
