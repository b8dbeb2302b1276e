"""The framework names no application: each app's name appears only in its own folder, and
the framework finds it as a ``neural_arch.tasks`` entry point.

Run: ``.venv/bin/python -m pytest tests/test_app_boundary.py -q``

For every folder ``neural_arch/apps/<name>/``, no Python file of the package outside that
folder mentions ``<name>`` (any case), except the default task's one line in
``training/config_sections.py`` (``task: str = "<name>"``, a string: nothing is imported). Every app
is declared as an entry point in pyproject.toml, pointing into its own folder, and the
installed entry points (what the registry reads) match that declaration, so a stale install
is caught here. The import rules (model files import no distributed code, the framework
imports nothing from apps/) are checked by ``tools/check_layout.py`` (tests/test_layout.py).
"""

from importlib.metadata import entry_points
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "neural_arch"
APPS = sorted(p.name for p in (PACKAGE / "apps").iterdir() if (p / "__init__.py").exists())
CONFIG = PACKAGE / "training" / "config_sections.py"
GROUP = "neural_arch.tasks"
DECLARED = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"][GROUP]
REINSTALL = "run `.venv/bin/python -m pip install -e . --no-deps` so the installed entry points match pyproject.toml"


@pytest.mark.parametrize("app", APPS)
def test_app_is_named_only_in_its_folder_and_the_default_task(app):
    outside = [
        (path, f"{path.relative_to(REPO)}:{number}: {line.strip()}", line.strip())
        for path in sorted(PACKAGE.rglob("*.py"))
        if app not in path.relative_to(PACKAGE).parts[:2]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if app in line.lower()
    ]
    elsewhere = [where for path, where, line in outside if not (path == CONFIG and line == f'task: str = "{app}"')]
    assert not elsewhere, "\n".join(elsewhere)


def test_exactly_one_app_is_the_default():
    text = CONFIG.read_text().splitlines()
    assert sum(line.strip() in {f'task: str = "{app}"' for app in APPS} for line in text) == 1


@pytest.mark.parametrize("app", APPS)
def test_app_is_declared_as_an_entry_point_into_its_own_folder(app):
    assert app in DECLARED, f'pyproject.toml: add {app} = "neural_arch.apps.{app}.task:..." under {GROUP}'
    assert DECLARED[app].startswith(f"neural_arch.apps.{app}."), DECLARED[app]


def test_installed_entry_points_match_pyproject():
    installed = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    assert {name: installed.get(name) for name in DECLARED} == DECLARED, REINSTALL
    assert set(DECLARED) == set(APPS)


def test_registry_finds_every_app_by_name():
    from neural_arch.training.registry import known_tasks, task_class  # imports torch: only in this test

    assert set(APPS) <= set(known_tasks()), REINSTALL
    for app in APPS:
        cls = task_class(app)
        assert cls.__module__.startswith(f"neural_arch.apps.{app}."), cls
        assert cls.SECTIONS.model() is not None and cls.SECTIONS.data() is not None  # its config sections


def test_there_are_apps_to_check():
    assert {"gpt", "icenet", "regression"} <= set(APPS)
