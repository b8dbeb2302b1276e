"""The documentation site builds with ``mkdocs build --strict``: no warning, broken link or bad anchor.

Run: ``python -m pytest tests/test_docs_build.py -q`` (about 10 s); ``make docs`` is the same build
into build/site. Strict mode fails on a page missing from the nav, a link to a missing page or
heading, and on mkdocstrings' API pages failing to render.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO


@pytest.mark.multiprocess
def test_site_builds_strictly(tmp_path: Path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    for page in ("index.html", "config.html", "api/distributed.html", "api/task.html", "api/config.html"):
        assert (tmp_path / "site" / page).is_file(), page
    config = (tmp_path / "site" / "config.html").read_text(encoding="utf-8")
    assert "training.global_batch_size" in config and "parallel.dp_shard" in config
