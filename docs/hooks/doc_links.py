"""Links and heading anchors of a Markdown page, outside code: shared by the hooks and the tests.

Use: ``for link in links(text): print(link.line, link.path, link.anchor)``; ``anchors(text)``
is the set of ids a ``#fragment`` may name (MkDocs' slugs, GitHub's, and explicit ``{#id}``).
repo_files.py (an mkdocs hook) rewrites links with it; tests/test_docs_links.py checks them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import urlsplit

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
INLINE_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")
HTML_ID = re.compile(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"")


@dataclass(frozen=True)
class Link:
    """One link target as written: ``path`` (empty for ``#anchor`` alone) and ``anchor``."""

    line: int
    url: str
    path: str
    anchor: str
    start: int
    end: int

    @property
    def relative(self) -> bool:
        """A link into the repository (not ``https:``, ``mailto:`` or an absolute path)."""
        parts = urlsplit(self.url)
        return not parts.scheme and not parts.netloc and not self.url.startswith("/")


def prose_lines(text: str, blank_code: bool = True) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) outside fenced code blocks; inline code spans blanked out
    unless ``blank_code`` is false."""
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        found = FENCE.match(line)
        if fence is None and found:
            fence = found.group(1)
        elif fence is not None and found and found.group(1).startswith(fence[0] * len(fence)):
            fence = None
        elif fence is None and not blank_code:
            yield number, line
        elif fence is None:
            # same length, so the match offsets still index the original line
            yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def links(text: str) -> list[Link]:
    """Every inline ``[text](url)``/``![alt](url)`` and reference ``[name]: url`` target."""
    found = []
    lines = text.splitlines()
    for number, line in prose_lines(text):
        matches = list(INLINE_LINK.finditer(line)) + list(REFERENCE.finditer(line))
        for match in matches:
            url = lines[number - 1][match.start(1) : match.end(1)]
            path, _, anchor = url.partition("#")
            found.append(Link(number, url, path, anchor, match.start(1), match.end(1)))
    return found


def anchors(text: str) -> set[str]:
    """Ids the page's headings get on the site (MkDocs) and on GitHub, and explicit ids."""
    ids: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(text, blank_code=False):
        ids.update(HTML_ID.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        title = heading.group(2)
        explicit = EXPLICIT_ID.search(title)
        if explicit:
            ids.add(explicit.group(1))
            continue
        plain = _plain(title)
        for slug, sep in ((_mkdocs_slug(plain), "_"), (_github_slug(plain), "-")):
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            ids.add(slug if count == 0 else f"{slug}{sep}{count}")
    return ids


def _plain(title: str) -> str:
    """The heading's text as rendered: link text kept, code and emphasis marks dropped."""
    title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)
    return re.sub(r"[`*]", "", title)


def _mkdocs_slug(value: str) -> str:
    # Python-Markdown's toc.slugify, which MkDocs uses by default
    value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def _github_slug(value: str) -> str:
    value = re.sub(r"[^\w\s-]", "", value.strip().lower())
    return value.replace(" ", "-")
