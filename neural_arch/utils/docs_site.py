"""Where a command's ``--help`` sends the reader: the documentation site's page for it.

Use: ``epilog=docs_pointer("launcher.md")`` -> ``details: https://SITE/launcher.html``. The
site's URL is set in one place, pyproject.toml's ``[project.urls] Documentation``, and read
here from the installed package's metadata, so a wheel installed without a checkout points
at pages that exist; a never-installed checkout gets its ``docs/`` page instead.
"""

from __future__ import annotations

import functools
from typing import Optional


def docs_pointer(page: str) -> str:
    """The last line of a command's ``--help``: ``details:`` and the page ``page`` (a docs/ path)."""
    site = docs_site()
    if site is None:
        return f"details: docs/{page}"
    return f"details: {site}/{page.removesuffix('.md')}.html"  # mkdocs.yml: use_directory_urls false


@functools.lru_cache(maxsize=1)
def docs_site() -> Optional[str]:
    """The documentation site's URL from the installed metadata; None if there is none."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        urls = metadata("neural_arch").get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation":
            return url.strip().rstrip("/")
    return None
