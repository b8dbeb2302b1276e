"""Properties of the typed config: any valid values survive --set -> Config -> YAML -> Config,
and any bad value or key is one ``ConfigError`` line naming the key.

Run: ``.venv/bin/python -m pytest tests/training/test_config_properties.py -q``
Values are drawn for the framework's own sections (run, optim, schedule, training,
checkpoint, logging) within their documented ranges; the bad ones just outside them.
"""

import dataclasses
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neural_arch.training.config import Config, load_config, save_config
from neural_arch.training.typed_config import ConfigError
from tests.helpers.property_settings import PROPERTY

words = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_./-]{0,15}", fullmatch=True)
unit = st.floats(0, 1)
positive = st.floats(1e-6, 1e6)
# Valid values: key -> strategy (cross-field rules kept: the batch is a multiple of grad_accum_steps).
VALID = {
    "run.name": words,
    "run.dir": words,
    "run.seed": st.integers(0, 2**31 - 1),
    "optim.name": st.sampled_from(["sgd", "adam", "adamw"]),
    "optim.lr": positive,
    "optim.momentum": unit,
    "optim.weight_decay": st.floats(0, 10),
    "optim.betas": st.tuples(st.floats(0, 0.999), st.floats(0, 0.999)),
    "schedule.warmup_steps": st.integers(0, 1000),
    "schedule.decay": st.sampled_from(["cosine", "constant"]),
    "schedule.min_lr_ratio": unit,
    "training.steps": st.integers(1, 10**6),
    "training.max_restarts": st.integers(0, 9),
    "training.precision": st.sampled_from(["fp32", "fp64", "bf16", "fp16"]),
    "training.timeout": positive,
    "training.grad_clip": st.none() | positive,
    "training.nan_policy": st.sampled_from(["stop", "skip"]),
    "checkpoint.every_steps": st.integers(0, 1000),
    "checkpoint.keep_last": st.integers(1, 20),
    "checkpoint.format": st.sampled_from(["auto", "full", "sharded"]),
    "logging.every_steps": st.integers(1, 100),
    "logging.progress": st.booleans(),
    "logging.record_samples": st.booleans(),
}
# Out of range: key -> strategy of values of the right type that the key's rule refuses.
OUT_OF_RANGE = {
    "optim.lr": st.floats(-1e6, 0),
    "optim.momentum": st.floats(1.0001, 1e6) | st.floats(-1e6, -1e-9),
    "optim.weight_decay": st.floats(-1e6, -1e-9),
    "schedule.warmup_steps": st.integers(-(10**6), -1),
    "schedule.min_lr_ratio": st.floats(1.0001, 1e6),
    "training.steps": st.integers(-(10**6), 0),
    "training.global_batch_size": st.integers(-(10**6), 0),
    "training.timeout": st.floats(-1e6, 0),
    "training.grad_clip": st.floats(-1e6, 0),
    "checkpoint.keep_last": st.integers(-(10**6), 0),
    "logging.every_steps": st.integers(-(10**6), 0),
    "training.max_restarts": st.integers(-(10**6), -1),
}
INT_KEYS = [
    "run.seed",
    "schedule.warmup_steps",
    "training.steps",
    "training.max_restarts",
    "checkpoint.every_steps",
    "checkpoint.keep_last",
    "logging.every_steps",
]


def as_text(value) -> str:
    """How a user writes the value after ``--set key=``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "[" + ", ".join(repr(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value)


def value_at(cfg: Config, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


@PROPERTY
@given(st.fixed_dictionaries({}, optional=VALID), st.integers(1, 8), st.integers(1, 64))
def test_valid_values_round_trip_through_set_and_yaml(tmp_path_factory, values, accum, multiple):
    overrides = [f"{k}={as_text(v)}" for k, v in values.items()]
    overrides += [f"training.grad_accum_steps={accum}", f"training.global_batch_size={accum * multiple}"]
    cfg = load_config(None, overrides)
    for key, value in values.items():
        assert value_at(cfg, key) == value, (key, value_at(cfg, key), value)
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    save_config(cfg, path)
    assert load_config(path) == cfg


@PROPERTY
@given(st.sampled_from(sorted(OUT_OF_RANGE)).flatmap(lambda k: st.tuples(st.just(k), OUT_OF_RANGE[k])))
def test_out_of_range_is_one_line_naming_key_and_value(case):
    key, value = case
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"{key}={as_text(value)}"])
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{key}=") and "out of range" in message, message


@PROPERTY
@given(st.sampled_from(INT_KEYS), st.sampled_from(["abc", "1.5", "true", "[1, 2]", "{a: 1}", "1e3", "''"]))
def test_wrong_type_is_one_line_naming_the_key(key, text):
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"{key}={text}"])
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{key}: expected int"), message


@PROPERTY
@given(
    st.sampled_from(["run", "optim", "schedule", "training", "checkpoint", "logging"]),
    st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True),
)
def test_unknown_key_is_one_line_naming_it(section, name):
    fields = {f.name for f in dataclasses.fields(typing.get_type_hints(Config)[section])}
    if name in fields:
        return
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"{section}.{name}=1"])
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"unknown key '{section}.{name}'"), message
