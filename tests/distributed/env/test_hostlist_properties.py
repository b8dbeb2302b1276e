"""Properties of SLURM hostlist expansion (``expand_hostlist``) for generated expressions.

Run: ``.venv/bin/python -m pytest tests/distributed/env/test_hostlist_properties.py -q``
Expressions are built from a structure (prefix, bracket groups of numbers and zero-padded
ranges, suffix); the expected host list is computed from that structure directly (cartesian
product, leftmost group slowest), not by parsing. Garbage input must raise a one-line
``ValueError`` that quotes the expression, never anything else.
"""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from neural_arch.distributed.env import expand_hostlist
from tests.helpers.property_settings import PROPERTY

names = st.from_regex(r"[a-z][a-z0-9_.]{0,6}", fullmatch=True)
literals = st.from_regex(r"[a-z_.-]{0,4}", fullmatch=True)


@st.composite
def bracket_items(draw) -> tuple[str, list[str]]:
    """One item inside brackets: a number or a lo-hi range, maybe zero-padded; text and values.
    SLURM's rule: a lower bound written with a leading zero keeps its width for the whole range."""
    lo = draw(st.integers(0, 120))
    lo_text = str(lo).zfill(draw(st.integers(0, 4)))
    if draw(st.booleans()):
        return lo_text, [lo_text]
    hi = lo + draw(st.integers(0, 12))
    width = len(lo_text) if lo_text.startswith("0") and len(lo_text) > 1 else 0
    return f"{lo_text}-{hi}", [str(v).zfill(width) for v in range(lo, hi + 1)]


@st.composite
def groups(draw) -> tuple[str, list[str]]:
    items = draw(st.lists(bracket_items(), min_size=1, max_size=3))
    return "[" + ",".join(text for text, _ in items) + "]", [v for _, values in items for v in values]


@st.composite
def hostlist_items(draw) -> tuple[str, list[str]]:
    """``prefix[..]lit[..]...``: up to two bracket groups (SLURM orders 3+ differently)."""
    text = draw(names)
    parts = [[text]]
    for _ in range(draw(st.integers(0, 2))):
        group_text, values = draw(groups())
        literal = draw(literals)
        text += group_text + literal
        parts += [values, [literal]]
    return text, ["".join(p) for p in itertools.product(*parts)]


@PROPERTY
@given(st.lists(hostlist_items(), min_size=1, max_size=4))
def test_generated_expressions_expand_to_their_hosts(items):
    text = ",".join(t for t, _ in items)
    assert expand_hostlist(text) == [host for _, hosts in items for host in hosts]


@PROPERTY
@given(st.lists(names, min_size=1, max_size=8))
def test_plain_names_round_trip(hosts):
    assert expand_hostlist(",".join(hosts)) == hosts
    assert expand_hostlist(" , ".join(hosts) + ",") == hosts  # blanks and a trailing comma are ignored


@PROPERTY
@given(st.text(alphabet="ab01-[], ", max_size=9))
def test_any_text_expands_or_names_itself_in_one_line(text):
    try:
        hosts = expand_hostlist(text)
    except ValueError as exc:
        message = str(exc)
        assert message.startswith("hostlist ") and "\n" not in message, message
        quoted = message[len("hostlist ") :].split(":")[0].split(" is empty")[0]
        assert quoted.strip("'") in text or not text.strip(), message  # names (part of) what was given
        return
    assert all(isinstance(h, str) and h and "[" not in h and "]" not in h for h in hosts), (text, hosts)
    assert hosts or not text.strip(", "), (text, hosts)  # nothing only from commas and blanks
