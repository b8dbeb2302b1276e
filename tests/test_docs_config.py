"""The generated config reference (docs/config.md) covers every key, each with a docstring.

Run: ``python -m pytest tests/test_docs_config.py -q``. The reference is written at build time by
docs/hooks/config_keys.py from the dataclasses (framework sections and every installed task's
``model:``/``data:``); a field without the string under it would show an empty description.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers.doc_pages import DOCS, hook

SECTIONS = hook("config_keys").sections()


@pytest.mark.parametrize("section, task, cls", SECTIONS, ids=[f"{s}-{t}" if t else s for s, t, _ in SECTIONS])
def test_every_field_has_a_docstring(section, task, cls):
    docs = hook("config_keys").field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing, f"{cls.__module__}.{cls.__name__} ({section}:): fields without a docstring: {missing}"


def test_reference_lists_every_key_once():
    text = hook("config_keys").reference()
    for section, _, cls in SECTIONS:
        for f in dataclasses.fields(cls):
            assert f"| `{section}.{f.name}` |" in text
    assert text.count("## `training:`") == 1


def test_config_page_keeps_the_marker():
    assert hook("config_keys").MARKER in (DOCS / "config.md").read_text(encoding="utf-8")
