"""A closed set of values is a ``Literal`` field, checked by the typed config alone, in one line.

Run: ``.venv/bin/python -m pytest tests/training/test_config_literals.py -q`` (about 2 s, no processes).
Every ``Literal`` (or ``Optional[Literal]``) field of every section (the framework's and each
installed task's) refuses a value outside its choices with one line naming the key, the value,
each allowed value and the closest one; every choice loads. A layout built in Python is held to
the same choices by ``validate``, read off the same annotations.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

import pytest

from neural_arch.distributed.parallel import ParallelLayout, validate
from neural_arch.training.config import ConfigError, load_config, section_types
from neural_arch.training.registry import known_tasks, task_class


def choices(tp: Any) -> tuple[Any, ...]:
    """The values a Literal (or Optional[Literal]) field allows; () for any other type."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    return tuple(c for a in typing.get_args(tp) if typing.get_origin(a) is Literal for c in typing.get_args(a))


def literal_fields() -> list[tuple[str, str, tuple[Any, ...]]]:
    """(task, section.key, choices) of every Literal field, each key once."""
    found: dict[str, tuple[str, tuple[Any, ...]]] = {}
    for task in known_tasks():
        for section, cls in section_types(task_class(task)).items():
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                allowed = choices(hints[f.name])
                if allowed:
                    found.setdefault(f"{section}.{f.name}", (task, allowed))
    return [(task, key, allowed) for key, (task, allowed) in sorted(found.items())]


FIELDS = literal_fields()


def test_the_closed_sets_are_literals():
    keys = {key for _, key, _ in FIELDS}
    expected = {
        "training.precision",
        "training.backend",
        "training.nan_policy",
        "optim.name",
        "schedule.decay",
        "checkpoint.format",
        "logging.wandb_mode",
        "ddp.compression",
        "parallel.pp_schedule",
        "parallel.param_dtype",
        "parallel.reduce_dtype",
    }
    assert expected <= keys, expected - keys


@pytest.mark.parametrize("task, key, allowed", FIELDS, ids=[key for _, key, _ in FIELDS])
def test_a_value_outside_the_choices_is_one_line(task, key, allowed):
    wrong = f"{allowed[0]}x"
    with pytest.raises(ConfigError) as info:
        load_config(None, [f"run.task={task}", f"{key}={wrong}"])
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{key}: ")
    assert repr(wrong) in message and f"did you mean {allowed[0]!r}" in message
    for choice in allowed:
        assert (repr(choice) if choice is not None else "null") in message, message


def test_every_choice_loads():
    """Each choice is read as itself (a key whose value needs more than the choice, e.g. a GPU for
    ``training.backend=nccl``, is checked later, by what it needs, not here)."""
    from neural_arch.training.config import read_config

    for task, key, allowed in FIELDS:
        section, name = key.split(".")
        for choice in allowed:
            cfg = read_config(None, [f"run.task={task}", f"{key}={'null' if choice is None else choice}"])
            assert getattr(getattr(cfg, section), name) == choice


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(pp_schedule="dualpipe"), "parallel.pp_schedule='dualpipe' is not one of gpipe, 1f1b, interleaved_1f1b"),
        (dict(reduce_dtype="float32"), "parallel.reduce_dtype='float32' is not one of fp32, fp64, bf16, fp16, null"),
    ],
)
def test_a_layout_built_in_python_is_held_to_the_same_choices(values, message):
    with pytest.raises(ValueError) as info:
        validate(ParallelLayout(**values), 1)
    assert message in str(info.value) and "\n" not in str(info.value)
