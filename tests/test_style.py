"""One formatter and linter for the tree: ``ruff check`` and ``ruff format --check`` pass.

Run: ``.venv/bin/python -m pytest tests/test_style.py -q`` (a second or two). The rules are
in pyproject.toml (``[tool.ruff]``: line length 120, pycodestyle, pyflakes, isort, bugbear,
pyupgrade). To fix what this reports: ``.venv/bin/ruff format . && .venv/bin/ruff check --fix .``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.paths import REPO


@pytest.mark.parametrize("command", [["check", "--output-format", "concise"], ["format", "--check"]])
def test_ruff_passes(command):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "."], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"ruff {' '.join(command)} failed:\n{proc.stdout}{proc.stderr}"
