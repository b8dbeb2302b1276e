"""mypy on neural_arch/ finds exactly the errors of tests/mypy_baseline.txt: none new, and the baseline
may only shrink.

Run: ``.venv/bin/python -m pytest tests/test_types.py -q``. mypy is the version pinned in the ``dev``
extra, configured in pyproject.toml (``[[tool.mypy.overrides]]``); its cache lives in the system's temporary
folder, one per checkout and venv: a warm run takes seconds, a cold one about 25 s of CPU (most of
it reading torch's types). An error is compared as ``path: error: message  [code]``, without its
line number, so an edit elsewhere in a file does not break the comparison.
- A new error fails, named with its line: fix it (or, where mypy is wrong, a ``# type: ignore[code]``
  with the reason beside it).
- A baseline error that is gone fails too: delete its line from the baseline, which so only shrinks.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

BASELINE = REPO / "tests" / "mypy_baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\s]+\.pyi?):\d+(?::\d+)?: error: (?P<message>.*)$")


def cache_dir() -> Path:
    """One mypy cache per checkout and interpreter, kept between runs in the temporary folder."""
    key = hashlib.sha1(f"{REPO}\0{sys.prefix}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"neural_arch-mypy-{key}"


def run_mypy() -> dict[str, list[str]]:
    """Every error mypy reports on neural_arch/: its normalized form -> the lines as mypy wrote them."""
    command = [sys.executable, "-m", "mypy", "neural_arch", "--cache-dir", str(cache_dir())]
    flags = ["--no-error-summary", "--hide-error-context", "--no-pretty", "--no-color-output", "--soft-error-limit=-1"]
    proc = subprocess.run(command + flags, cwd=REPO, capture_output=True, text=True, timeout=540)
    assert proc.returncode in (0, 1), f"mypy did not run (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
    found: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            found.setdefault(f"{match['path']}: error: {match['message']}", []).append(line)
    return found


def baseline() -> Counter[str]:
    lines = BASELINE.read_text().splitlines()
    return Counter(line for line in lines if line.strip() and not line.startswith("#"))


@pytest.mark.timeout(600)
def test_mypy_finds_the_baseline_errors_and_no_others():
    found, known = run_mypy(), baseline()
    now = Counter({error: len(lines) for error, lines in found.items()})
    new, gone = now - known, known - now
    added = [line for error, count in sorted(new.items()) for line in found[error][-count:]]
    assert not added, f"mypy finds {len(added)} new error(s) on neural_arch/; fix them:\n" + "\n".join(added)
    assert not gone, (
        f"{sum(gone.values())} error(s) of {BASELINE.relative_to(REPO)} are fixed: delete these lines from it "
        "(the baseline only shrinks):\n" + "\n".join(sorted(gone.elements()))
    )


if __name__ == "__main__":  # print the normalized errors of today, sorted: the baseline's body
    print("\n".join(sorted(Counter({e: len(lines) for e, lines in run_mypy().items()}).elements())))
