"""Every ``--help`` of ``neural-arch`` ends with the docs page that explains the command.

Run: ``.venv/bin/python -m pytest tests/cli/test_help_docs.py -q``

The last line of ``neural-arch --help``, of each subcommand's ``--help`` and of the
launcher's (``python -m neural_arch.distributed.launcher --help``) is ``details: SITE/PAGE.html``
(SITE: pyproject.toml's Documentation URL, as an installed package reads it) and docs/PAGE.md
exists in the repository, so a renamed or removed page fails here.
"""

import re

import pytest

from neural_arch.cli import COMMANDS
from neural_arch.distributed.launcher import main as launcher_main
from neural_arch.utils.docs_site import docs_site
from tests.helpers.cli import run_main
from tests.helpers.paths import REPO

SITE = docs_site()
"""The documentation site's URL from the installed metadata (None only in a never-installed checkout)."""


def pointed_page(out: str) -> str:
    """The docs/ page behind the help text's last line; fails if that line is not a pointer."""
    last = out.rstrip().splitlines()[-1].strip()
    pointer = rf"details: {re.escape(SITE)}/([\w/.-]+)\.html" if SITE else r"details: docs/([\w/.-]+)\.md"
    found = re.fullmatch(pointer, last)
    assert found, f"--help does not end with a pointer to a page of {SITE or 'docs/'}: {last!r}"
    return f"docs/{found.group(1)}.md"


def test_the_installed_package_names_its_documentation_site():
    assert SITE is not None and SITE.startswith("https://"), "pyproject.toml: [project.urls] Documentation"


@pytest.mark.parametrize("argv", [["--help"]] + [[name, "--help"] for name in COMMANDS], ids=" ".join)
def test_help_ends_with_an_existing_docs_page(argv, capsys):
    code, out, _ = run_main(argv, capsys)
    assert code == 0
    page = pointed_page(out)
    assert (REPO / page).is_file(), f"neural-arch {' '.join(argv)} points at {page}, which does not exist"


def test_launcher_help_points_at_the_launcher_page(capsys):
    with pytest.raises(SystemExit) as stop:
        launcher_main(["--help"])
    assert stop.value.code == 0
    assert pointed_page(capsys.readouterr().out) == "docs/launcher.md"
