"""The recipes ship in the package, and ``--config`` takes a recipe's name or a file's path.

Run: ``.venv/bin/python -m pytest tests/training/test_recipes.py -q``
"""

from pathlib import Path

import pytest

from neural_arch.training.config import load_config
from neural_arch.training.recipes import RECIPES_DIR, config_file, recipe_names, recipe_path
from neural_arch.training.typed_config import ConfigError
from tests.helpers.paths import REPO


def test_the_repository_configs_folder_is_the_package_recipes_not_a_copy():
    # One set of files: configs/ (Makefile, hpc/, benchmarks, tests) cannot drift from what ships.
    assert (REPO / "configs").resolve() == RECIPES_DIR.resolve()
    assert RECIPES_DIR.resolve().parent == (REPO / "neural_arch").resolve()
    assert {"tiny", "icenet", "gpt"} <= set(recipe_names())


def test_the_recipes_are_package_data_in_pyproject():
    text = (REPO / "pyproject.toml").read_text()
    assert 'neural_arch = ["recipes/*.yaml"]' in text


@pytest.mark.parametrize("name", ["tiny", "tiny.yaml", "tiny.yml"])
def test_a_name_resolves_to_the_shipped_file(name):
    assert config_file(name) == RECIPES_DIR / "tiny.yaml"
    assert load_config(name).run.name == "tiny"


def test_an_existing_file_wins_over_a_recipe_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tiny").write_text("run:\n  name: mine\n")
    assert config_file("tiny") == Path("tiny")
    assert load_config("tiny").run.name == "mine"


def test_a_path_is_never_read_as_a_recipe(tmp_path):
    with pytest.raises(ConfigError, match=r"neither a file nor a recipe; recipes: .*tiny") as err:
        config_file(tmp_path / "tiny.yaml")
    assert "did you mean" not in str(err.value)


def test_an_unknown_name_is_one_line_listing_the_recipes_with_the_closest():
    with pytest.raises(ConfigError) as err:
        load_config("icenett")
    text = str(err.value)
    assert "\n" not in text
    assert "did you mean 'icenet'?" in text
    assert all(name in text for name in recipe_names())


def test_recipe_path_refuses_an_unknown_name():
    assert recipe_path("gpt") == RECIPES_DIR / "gpt.yaml"
    with pytest.raises(ConfigError, match="no recipe named 'gtp' \\(did you mean 'gpt'\\?\\)"):
        recipe_path("gtp")
