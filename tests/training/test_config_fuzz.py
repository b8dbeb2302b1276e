"""Fuzz the config loader: any file gives a valid ``Config`` or one ``ConfigError`` line, in
bounded memory; through ``neural-arch train`` that line is the whole output and the exit is 2.

Run: ``.venv/bin/python -m pytest tests/training/test_config_fuzz.py -q``
10,000 inputs: YAML-shaped documents built from the real section and key names with hostile
scalars (anchors, aliases, tags, huge and odd numbers, merge keys, flow collections, bad
indentation), arbitrary text, and arbitrary bytes. Hypothesis settings as in
tests/helpers/property_settings.py (no deadline, no database), with more examples.
"""

import dataclasses
import json
import resource

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neural_arch.cli import main
from neural_arch.training.config import Config, load_config
from neural_arch.training.typed_config import ConfigError

FUZZ = settings(
    max_examples=10_000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
SECTIONS = [f.name for f in dataclasses.fields(Config)]
KEYS = sorted(
    {f.name for s in dataclasses.fields(Config) if dataclasses.is_dataclass(s.type) for f in dataclasses.fields(s.type)}
    | {"name", "seed", "lr", "steps", "task", "dir", "init_from", "<<", "? x", "- y", "a b", ""}
)
ODD = [
    "null",
    "~",
    "true",
    "yes",
    "1e23",
    "1e308",
    "-1e308",
    ".inf",
    ".nan",
    "-0",
    "0x10",
    "0o17",
    "1_000",
    "2**63",
    "9" * 40,
    "'x'",
    '"\\u0000"',
    "&a x",
    "*a",
    "&a [*a]",
    "[x, *a]",
    "{a: 1}",
    "[]",
    "{}",
    "!!binary aGk=",
    "!!python/object/apply:os.system [ls]",
    "!!set {a}",
    "!!timestamp 2001-12-14",
    "!!float x",
    "|",
    ">-",
    "%",
    "@",
    "`",
    "[[[[[[",
    "]]",
    "'unterminated",
    "../../x:y",
    "/dev/zero",
    "a:b:c",
    "\t",
    "\x00",
    "\ud7ff",
    "é",
]
scalar = st.one_of(
    st.sampled_from(ODD),
    st.integers().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=30).map(json.dumps),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
)
line = st.tuples(
    st.integers(0, 3), st.sampled_from(SECTIONS + KEYS), st.sampled_from([": ", ":", " ", ": &a ", ": *a"]), scalar
)
document = st.lists(line, max_size=14).map(lambda ls: "\n".join(f"{'  ' * i}{k}{sep}{v}" for i, k, sep, v in ls))
config_bytes = st.one_of(
    document.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=300),
)


@pytest.mark.timeout(
    900
)  # 10,000 inputs: ~110 s on a loaded 2-core machine, over the suite's 180 s default under more load
def test_any_config_file_is_a_config_or_one_line(tmp_path_factory, capsys):
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seen = {"valid": 0, "refused": 0}

    @FUZZ
    @given(config_bytes)
    def check(data):
        path.write_bytes(data)
        try:
            assert isinstance(load_config(str(path)), Config)
            seen["valid"] += 1
        except ConfigError as exc:
            message = str(exc)
            assert message and "\n" not in message and len(message) < 2000, message
            seen["refused"] += 1

    check()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 300, grown_mib  # bounded memory over all 10,000 inputs
    assert seen["valid"] >= 10 and seen["refused"] > 1000, seen  # the inputs reach both outcomes


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=config_bytes)
def test_cli_says_one_line_and_exits_2(tmp_path_factory, capsys, data):
    """Through ``neural-arch train`` (``training.steps=0`` makes even a valid file stop before training)."""
    path = tmp_path_factory.mktemp("cli") / "config.yaml"
    path.write_bytes(data)
    try:
        code = main(["train", "--config", str(path), "--set", "training.steps=0"])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
