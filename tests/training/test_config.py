"""Typed config: defaults, YAML < --set precedence, round trip, and one-line errors.

Run: ``.venv/bin/python -m pytest tests/training/test_config.py -q``

Each bad config must raise ``ConfigError`` (a ``ValueError``) whose single-line message
names the key path and the bad value, so a user can fix it without reading code.
"""

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml

from neural_arch.training.config import (
    Config,
    ConfigError,
    config_to_dict,
    load_config,
    save_config,
    section_types,
    validate_config,
)
from neural_arch.training.registry import known_tasks, task_class

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, text, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_load_and_are_typed():
    cfg = load_config()
    assert cfg == Config()
    assert cfg.optim.lr == 0.05 and cfg.optim.betas == (0.9, 0.999)
    assert cfg.training.steps == 100 and cfg.training.grad_clip is None
    assert type(cfg.training.timeout) is float and cfg.training.timeout == 600
    assert cfg.checkpoint.resume == "auto" and cfg.data.path is None


def test_empty_file_and_empty_section_mean_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == Config()
    assert load_config(write(tmp_path, "training:\noptim:\n")) == Config()


def test_tiny_recipe_loads_at_world_sizes_1_2_4():
    for world_size in (1, 2, 4):
        cfg = load_config(REPO / "configs" / "tiny.yaml", world_size=world_size)
        assert (cfg.run.task, cfg.model.hidden) == ("regression", 16)
        assert (cfg.data.name, cfg.data.num_samples) == ("synthetic", 96)
        assert (cfg.training.global_batch_size, cfg.training.steps, cfg.checkpoint.every_steps) == (8, 20, 5)


def test_file_overrides_defaults_and_set_overrides_file(tmp_path):
    path = write(tmp_path, "optim:\n  lr: 0.2\n  name: adam\ntraining:\n  steps: 50\n")
    cfg = load_config(path, ["optim.lr=0.3", "training.grad_accum_steps=2", "optim.lr=0.4"])
    assert cfg.optim.lr == 0.4  # --set beats the file; a later --set beats an earlier one
    assert cfg.optim.name == "adam" and cfg.training.steps == 50  # file beats defaults
    assert cfg.training.grad_accum_steps == 2
    assert cfg.optim.momentum == 0.9  # untouched default


def test_override_values_are_parsed_as_yaml():
    cfg = load_config(
        overrides=[
            "training.distributed=true",
            "optim.betas=[0.8, 0.99]",
            "optim.lr=1e-3",
            "optim.weight_decay=1",
            "training.grad_clip=2",
            "run.name=2024",
            "data.path=null",
            "checkpoint.resume=none",
        ]
    )
    assert cfg.training.distributed is True
    assert cfg.optim.betas == (0.8, 0.99)
    assert cfg.optim.lr == 0.001  # PyYAML reads 1e-3 as text; it is still a float here
    assert type(cfg.optim.weight_decay) is float and cfg.optim.weight_decay == 1.0  # int accepted for float
    assert type(cfg.training.grad_clip) is float and cfg.training.grad_clip == 2.0
    assert cfg.run.name == "2024"  # a str field keeps the text, not the int
    assert cfg.data.path is None and cfg.checkpoint.resume == "none"


def test_round_trip_save_load_is_equal(tmp_path):
    data_file = write(tmp_path, "x", "data.bin")
    cfg = load_config(
        overrides=[
            "run.name=rt",
            "optim.name=adamw",
            "optim.betas=[0.85, 0.95]",
            "optim.lr=0.003",
            "training.grad_clip=0.5",
            "training.precision=bf16",
            "schedule.decay=constant",
            "data.name=file",
            f"data.path={data_file}",
            "logging.tensorboard=false",
        ]
    )
    assert cfg != Config()
    plain = config_to_dict(cfg)
    assert plain["optim"]["betas"] == [0.85, 0.95] and type(plain["optim"]["betas"]) is list
    yaml.safe_dump(plain)  # raises on anything that is not plain YAML
    out = tmp_path / "nested" / "dir" / "config.yaml"
    save_config(cfg, out)
    assert load_config(out) == cfg
    assert [p.name for p in out.parent.iterdir()] == ["config.yaml"]  # no temporary file left


def test_world_size_divisibility_passes_when_divisible():
    load_config(overrides=["training.global_batch_size=12"], world_size=3)
    load_config(overrides=["training.global_batch_size=12", "training.grad_accum_steps=2"], world_size=3)
    # nproc_per_node only stands in for the world size when the run is distributed
    load_config(overrides=["training.global_batch_size=10", "training.nproc_per_node=3"])


def test_existing_data_file_is_accepted(tmp_path):
    data_file = write(tmp_path, "x", "data.bin")
    assert load_config(overrides=["data.name=file", f"data.path={data_file}"]).data.path == str(data_file)


BAD = [  # id, YAML text (or None), overrides, world_size, substrings the message must contain
    ("unknown-key", None, ["optim.lrr=0.1"], None, ["optim.lrr", "did you mean 'optim.lr'"]),
    ("unknown-key-in-file", "optim:\n  momentun: 0.5\n", [], None, ["optim.momentun", "did you mean 'optim.momentum'"]),
    ("typo-section", "traning:\n  steps: 5\n", [], None, ["traning", "did you mean 'training'"]),
    ("typo-section-set", None, ["traning.steps=5"], None, ["traning", "did you mean 'training'"]),
    ("str-for-int", None, ["training.steps=ten"], None, ["training.steps: expected int, got 'ten' (str)"]),
    ("bool-for-int", "training:\n  steps: true\n", [], None, ["training.steps", "true", "bool"]),
    ("null-for-int", "training:\n  steps: null\n", [], None, ["training.steps", "null"]),
    ("str-for-bool", None, ["training.distributed=maybe"], None, ["training.distributed", "'maybe'", "bool"]),
    ("negative-lr", None, ["optim.lr=-0.1"], None, ["optim.lr=-0.1", "> 0"]),
    ("nan-lr", "optim:\n  lr: .nan\n", [], None, ["optim.lr", "nan", "finite"]),
    ("momentum-above-1", None, ["optim.momentum=1.5"], None, ["optim.momentum=1.5", "between 0 and 1"]),
    ("zero-steps", None, ["training.steps=0"], None, ["training.steps=0", ">= 1"]),
    ("zero-grad-clip", None, ["training.grad_clip=0"], None, ["training.grad_clip=0", "> 0"]),
    (
        "literal-not-a-choice",
        None,
        ["training.precision=fp8"],
        None,
        ["training.precision", "'fp8'", "'fp32', 'fp64', 'bf16', 'fp16'"],
    ),
    ("literal-did-you-mean", None, ["optim.name=adamm"], None, ["optim.name", "'adamm'", "did you mean 'adam'"]),
    (
        "batch-vs-world-size",
        None,
        ["training.global_batch_size=10"],
        3,
        ["training.global_batch_size=10 is not divisible by world size 3 x grad_accum_steps 1; use a multiple of 3"],
    ),
    (
        "batch-vs-nproc",
        None,
        ["training.global_batch_size=10", "training.distributed=true", "training.nproc_per_node=3"],
        None,
        ["training.global_batch_size=10", "world size 3"],
    ),
    (
        "batch-vs-world-x-accum",
        None,
        ["training.global_batch_size=12", "training.grad_accum_steps=2"],
        4,
        ["training.global_batch_size=12", "world size 4 x grad_accum_steps 2", "multiple of 8"],
    ),
    (
        "grad-accum-not-dividing",
        None,
        ["training.global_batch_size=10", "training.grad_accum_steps=3"],
        None,
        ["training.global_batch_size=10", "training.grad_accum_steps=3", "multiple of 3"],
    ),
    ("file-data-without-path", None, ["data.name=file"], None, ["data.path=null", "--set data.path="]),
    (
        "file-data-missing-path",
        None,
        ["data.name=file", "data.path=/nonexistent/ice.zarr"],
        None,
        ["data.path='/nonexistent/ice.zarr'", "does not exist"],
    ),
    ("malformed-override", None, ["optim.lr"], None, ["'optim.lr'", "section.key=value"]),
    ("override-without-section", None, ["steps=5"], None, ["'steps=5'", "section.key=value"]),
    ("override-too-deep", None, ["optim.lr.x=1"], None, ["optim.lr.x", "did you mean 'optim.lr'"]),
    ("override-into-non-mapping", "training: 5\n", ["training.steps=3"], None, ["training", "5", "mapping"]),
    ("tuple-wrong-length", None, ["optim.betas=[0.9]"], None, ["optim.betas", "[0.9]", "2 values"]),
    ("tuple-bad-element", None, ["optim.betas=[0.9, fast]"], None, ["optim.betas[1]", "'fast'"]),
    ("tuple-out-of-range", None, ["optim.betas=[0.9, 1.0]"], None, ["optim.betas=[0.9, 1.0]", "[0, 1)"]),
    ("section-not-mapping", "training: 5\n", [], None, ["training", "5", "mapping"]),
    ("top-level-not-mapping", "- a\n- b\n", [], None, ["cfg.yaml", "['a', 'b']", "mapping"]),
    (
        "unknown-task",
        None,
        ["run.task=icenett"],
        None,
        [
            "run.task='icenett'",
            "did you mean 'icenet'",
            "installed tasks: gpt, icenet, regression",
            "entry point",
            "module:TaskClass",
        ],
    ),
    ("task-module-missing", None, ["run.task=no_such_pkg.tasks:Mine"], None, ["'no_such_pkg.tasks'", "PYTHONPATH"]),
    ("task-not-a-task", None, ["run.task=pathlib:Path"], None, ["pathlib:Path", "not a subclass", "Task"]),
    (
        "key-of-another-task",
        None,
        ["run.task=icenet", "model.hidden=3"],
        None,
        ["unknown key 'model.hidden'", "known keys: widths, dropout"],
    ),
    (
        "key-of-another-task-in-file",
        "run:\n  task: icenet\ndata:\n  path: x\n  num_samples: 3\n",
        [],
        None,
        ["unknown key 'data.num_samples'"],
    ),
    ("icenet-without-path", None, ["run.task=icenet"], None, ["data.path=null", "create-data"]),
    (
        "icenet-val-years",
        None,
        ["run.task=icenet", "data.path=x", "data.val_years=25"],
        None,
        ["data.val_years=25", "data.years=25"],
    ),
    (
        "pipeline-too-few-microbatches",
        None,
        ["run.task=gpt", "parallel.pp=2", "parallel.microbatches=1"],
        2,
        ["parallel.microbatches=1 is less than pp=2", "set microbatches >= 2"],
    ),
    ("yaml-syntax-error", "training:\n  steps: [1, 2\nmodel: {}\n", [], None, ["cfg.yaml:3", "invalid YAML"]),
]


@pytest.mark.parametrize("text,overrides,world_size,expected", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_raises_one_clear_line(tmp_path, text, overrides, world_size, expected):
    path = write(tmp_path, text) if text is not None else None
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides, world_size=world_size)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "\n" not in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_missing_config_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match="no_such.yaml"):
        load_config(tmp_path / "no_such.yaml")


def test_validate_config_checks_a_directly_built_config():
    cfg = Config()
    validate_config(cfg, world_size=4)
    cfg.training.global_batch_size = 30
    with pytest.raises(ConfigError, match="use a multiple of 4"):
        validate_config(cfg, world_size=4)


def test_pipeline_alone_validates_with_one_microbatch_per_stage_rank(tmp_path):
    """``--set parallel.pp=2`` with no microbatches: the default is pp, saved as the count it resolved to."""
    cfg = load_config(None, ["run.task=gpt", "parallel.pp=2"], world_size=2)
    assert (cfg.parallel.pp, cfg.parallel.microbatches) == (2, 2)
    cfg = load_config(None, ["run.task=gpt", "parallel.pp=2", "parallel.pp_schedule=interleaved_1f1b"], world_size=2)
    assert cfg.parallel.microbatches == 2
    save_config(cfg, tmp_path / "saved.yaml")
    assert yaml.safe_load((tmp_path / "saved.yaml").read_text())["parallel"]["microbatches"] == 2
    assert load_config(tmp_path / "saved.yaml", world_size=2) == cfg


def test_no_installed_tasks_says_how_to_install(monkeypatch):
    """A source tree that was never pip-installed has no entry points: the error says so and how to fix it."""
    monkeypatch.setattr("neural_arch.training.registry.entry_points", lambda group: [])
    monkeypatch.setattr("neural_arch.training.registry._registered", {})  # another test may have registered one
    with pytest.raises(ConfigError) as info:
        task_class("gpt")
    assert "no tasks are installed" in str(info.value) and "pip install -e ." in str(info.value)


@pytest.mark.parametrize("task", known_tasks())
def test_every_field_has_a_docstring(task):
    """Principle 6: each field is followed by a string literal explaining it (the task's
    model/data sections too)."""
    for cls in [Config, *section_types(task_class(task)).values()]:
        body = ast.parse(inspect.getsource(inspect.getmodule(cls))).body
        body = next(n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
        documented = {
            stmt.target.id
            for stmt, nxt in zip(body, body[1:] + [None])
            if isinstance(stmt, ast.AnnAssign)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        }
        assert documented == {f.name for f in dataclasses.fields(cls)}, cls.__name__


def test_the_task_decides_the_model_and_data_sections(tmp_path):
    ice = load_config(REPO / "configs" / "icenet.yaml", ["model.widths=[4, 8]"])
    assert ice.run.task == "icenet" and ice.model.widths == [4, 8] and ice.data.grid == 48
    # --set run.task switches the sections the same list's other overrides are checked against
    switched = load_config(None, ["model.widths=[4]", "run.task=icenet", "data.path=p"])
    assert switched.run.task == "icenet" and switched.model.widths == [4]
    assert type(load_config().model).__name__ == "RegressionModelConfig"
    out = tmp_path / "ice.yaml"
    save_config(ice, out)
    assert load_config(out) == ice  # the app's sections round-trip through YAML too
