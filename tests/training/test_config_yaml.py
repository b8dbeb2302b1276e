"""Hostile config files: an alias bomb is refused in bounded memory, duplicate keys and huge
strings are one-line errors, a non-UTF-8 file or a FIFO is named, and values are shown cut
short without being expanded.

Run: ``.venv/bin/python -m pytest tests/training/test_config_yaml.py -q``
Memory is measured with ``tracemalloc`` (Python allocations: where PyYAML and ``repr`` spend it).
"""

import os
import tracemalloc

import pytest

from neural_arch.training.config import load_config
from neural_arch.training.typed_config import ConfigError, show

# 9 levels of 9 aliases in run.name (a str field, so the error shows the value): ~400 bytes
# standing for 9**9 (387 million) strings.
BOMB = "run:\n  name:\n  - &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  - &{new} [{', '.join([f'*{old}'] * 9)}]\n" for old, new in zip("abcdefgh", "bcdefghi")
)


def peak_bytes(call):
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def refused(path, *overrides):
    with pytest.raises(ConfigError) as raised:
        load_config(str(path), list(overrides))
    message = str(raised.value)
    assert "\n" not in message and len(message) < 400, message
    return message


def test_alias_bomb_is_refused_in_bounded_memory(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert len(BOMB) < 500
    peak = peak_bytes(lambda: refused(path))
    assert "aliases expand to more than 100000 values" in refused(path)
    assert peak < 20 << 20, peak  # used to grow without bound in repr()


def test_shared_value_is_shown_without_expanding(tmp_path):
    value = ["x"]
    for _ in range(9):
        value = [value] * 9  # 9**9 leaves, as a bomb that got past the loader would be
    peak = peak_bytes(lambda: show(value))
    assert len(show(value)) <= 60 and peak < 1 << 20


@pytest.mark.parametrize(
    "text, expected",
    [
        ("run:\n  seed: 1\n  seed: 2\n", "duplicate key 'seed' (first given on line 2)"),
        ("run: {}\nrun: {}\n", "duplicate key 'run'"),
        ("run: &r\n  name: *r\n", "a recursive alias"),
        ("run:\n  name: " + "x" * 20_000 + "\n", "a string of 20000 characters, over the 10000 allowed"),
        ("[" * 3000 + "]" * 3000, "nested too deeply"),
        (" !!timestamp 2001-12-14\nrun:null", "a tagged value that cannot be built"),  # found by the fuzz test
    ],
)
def test_bad_yaml_is_one_line(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert expected in refused(path)


def test_merge_keys_may_still_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("run:\n  <<: {seed: 1, name: base}\n  seed: 2\n")
    cfg = load_config(str(path))
    assert (cfg.run.seed, cfg.run.name) == (2, "base")


def test_huge_override_is_one_line():
    with pytest.raises(ConfigError, match="--set run.name: a value of 100000 characters, over the 10000 allowed"):
        load_config(None, ["run.name=" + "x" * 100_000])


def test_non_utf8_and_fifo_configs_are_named(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"run:\n  name: caf\xe9\n")
    assert refused(latin) == f"{latin}: not UTF-8 text (byte 0xe9 at offset 16); save it as UTF-8"
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # would block read_text() until a writer came
    assert "is not a regular file (a FIFO)" in refused(fifo)


def test_a_config_over_1_mib_is_refused_before_it_is_parsed(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("run:\n  name: x\n" + "#" * (1 << 20) + "\n")  # a comment: valid YAML, just too long
    assert refused(big) == f"cannot read config file '{big}': has 1048592 bytes, more than the 1048576 allowed"


@pytest.mark.parametrize(
    "override, expected",
    [
        ("run.seed=100000000000000000000000", "run.seed=100000000000000000000000 is out of range"),
        ("optim.lr=1e308", "optim.lr=1e+308 is out of range: must be > 0 and <= 1e100"),
    ],
)
def test_numbers_torch_cannot_take_are_refused(override, expected):
    with pytest.raises(ConfigError, match=expected.replace("+", r"\+")):
        load_config(None, [override])
