"""Run by ``mkdocs build`` (mkdocs.yml ``hooks:``): publishes the repository files pages link to.

A link that leaves docs/, such as ``../benchmarks/overhead/README.md`` or
``../configs/tiny.yaml``, works as written when the repository is browsed; on the site this
hook adds the target as ``repo/benchmarks/overhead/README.md`` (a Markdown file becomes a
page, anything else is copied as is) and points the link there. The links of a page published
this way are followed too, and a link to a folder goes to its README.md. A target that does
not exist is left as written, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

import doc_links
from mkdocs.structure.files import File, Files, InclusionLevel

_site_uri: dict[Path, str] = {}
"""Real path of every published file (and every docs page) -> its path in the site's sources.
Filled by ``on_files`` and read by ``on_page_markdown`` of the same build: mkdocs hooks are
module functions, so what one event learns for a later one lives in the module."""


def on_files(files: Files, config) -> Files:
    docs = Path(config.docs_dir).resolve()
    root = Path(config.config_file_path).resolve().parent
    _site_uri.clear()
    _site_uri.update({Path(f.abs_src_path).resolve(): f.src_uri for f in files if f.abs_src_path})
    pending = [Path(f.abs_src_path).resolve() for f in files if f.is_documentation_page()]
    while pending:
        page = pending.pop()
        for link in doc_links.links(page.read_text(encoding="utf-8")):
            target = _target(page, link, root)
            if target is None or target in _site_uri or docs in target.parents:
                continue
            uri = "repo/" + target.relative_to(root).as_posix()
            _site_uri[target] = uri
            published = File.generated(config, uri, abs_src_path=str(target), inclusion=InclusionLevel.NOT_IN_NAV)
            files.append(published)
            if published.is_documentation_page():
                pending.append(target)
    return files


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    source = Path(page.file.abs_src_path).resolve()
    root = Path(config.config_file_path).resolve().parent
    docs = Path(config.docs_dir).resolve()
    lines = markdown.splitlines(keepends=True)
    for link in reversed(doc_links.links(markdown)):
        target = _target(source, link, root)
        uri = _site_uri.get(target) if target is not None else None
        if uri is None or (docs in target.parents and docs in source.parents):
            continue  # a link between pages of docs/ already resolves on the site as written
        here = posixpath.dirname(page.file.src_uri)
        url = posixpath.relpath(uri, here or ".") + (f"#{link.anchor}" if link.anchor else "")
        line = lines[link.line - 1]
        lines[link.line - 1] = line[: link.start] + url + line[link.end :]
    return "".join(lines)


def _target(page: Path, link: doc_links.Link, root: Path) -> Path | None:
    """The existing repository file a relative link names (a folder: its README.md), else None."""
    if not link.relative or not link.path:
        return None
    target = (page.parent / link.path).resolve()
    if target.is_dir():
        target = target / "README.md"
    if not target.is_file() or root not in target.parents:
        return None
    return target
