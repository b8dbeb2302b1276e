"""Every relative link in README.md and docs/**/*.md names a file that exists (and a heading there).

Run: ``python -m pytest tests/test_docs_links.py -q`` (a second; no torch). A link may leave
docs/ (``../benchmarks/overhead/README.md``, ``../configs/tiny.yaml``): it is checked like any
other, against the repository tree, as the site publishes those files (docs/hooks/repo_files.py).
An ``#anchor`` into a Markdown page must be one of its headings' ids (MkDocs' or GitHub's spelling)
or an explicit ``{#id}``; anchors into generated content (config.md's tables, API pages) are
left to the strict site build, which checks every anchor it renders.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.doc_pages import DOCS, PAGES, hook, page_id
from tests.helpers.paths import REPO

GENERATED = {DOCS / "config.md", *(DOCS / "api").glob("*.md")}
"""Pages whose headings are written at build time (hooks, mkdocstrings)."""


def broken_links(page: Path) -> list[str]:
    doc_links = hook("doc_links")
    text, problems = page.read_text(encoding="utf-8"), []
    for link in doc_links.links(text):
        if not link.relative:
            continue
        target = (page.parent / link.path).resolve() if link.path else page
        where = f"{page_id(page)}:{link.line}: {link.url}"
        if not target.exists():
            problems.append(f"{where}: {target.relative_to(REPO) if REPO in target.parents else target} does not exist")
        elif link.anchor and target.suffix == ".md" and target not in GENERATED:
            if link.anchor not in doc_links.anchors(target.read_text(encoding="utf-8")):
                problems.append(f"{where}: no heading with id {link.anchor!r} in {page_id(target)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_relative_links_resolve(page: Path):
    problems = broken_links(page)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_link_checker_sees_a_broken_link_and_anchor(tmp_path: Path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## The `ddp:` section\n")
    page.write_text(
        "# Title\n\n[ok](other.md#the-ddp-section) [gone](missing.md) [bad](other.md#nope) "
        "`[code](skipped.md)` [web](https://example.org)\n\n```python\nx = a[1](2)\n```\n"
    )
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "missing.md does not exist" in problems[0] and "'nope'" in problems[1]
