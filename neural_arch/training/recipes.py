"""The ready-to-run YAML recipes shipped inside the package, and what ``--config`` names.

Use: ``neural-arch train --config tiny`` (a recipe's name) or ``--config my.yaml`` (a file);
in Python ``load_config("tiny")`` resolves the same way through ``config_file``, and
``neural-arch recipes [NAME]`` lists them or prints one (cli/recipes.py).

The recipes are package data (``neural_arch/recipes/*.yaml``, declared in pyproject.toml), so
an installed package has them without a checkout; the repository's ``configs/`` is a link to
that folder, one set of files for both.
"""

from __future__ import annotations

from pathlib import Path

from neural_arch.training.typed_config import ConfigError, hint

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
"""Where the recipes live: ``neural_arch/recipes/`` of the installed package."""
_SUFFIXES = (".yaml", ".yml")


def recipe_names() -> list[str]:
    """Every recipe's name (its file name without ``.yaml``), sorted."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name: str) -> Path:
    """The file of the recipe ``name`` (``tiny`` or ``tiny.yaml``); ``ConfigError`` naming the
    recipes if there is none."""
    if _stem(name) in recipe_names():
        return RECIPES_DIR / f"{_stem(name)}.yaml"
    raise ConfigError(f"no recipe named {name!r}{hint(_stem(name), recipe_names())}; {_listing()}")


def config_file(path_or_name: str | Path) -> Path:
    """What ``--config`` names: an existing file wins (a path is never second-guessed), then a
    recipe's name; neither: a ``ConfigError`` line that lists the recipes."""
    path, text = Path(path_or_name), str(path_or_name)
    if path.is_file():
        return path
    if "/" not in text and _stem(text) in recipe_names():
        return RECIPES_DIR / f"{_stem(text)}.yaml"
    if path.exists():  # a directory, say: read_yaml reports what it is
        return path
    closest = hint(_stem(text), recipe_names()) if "/" not in text else ""
    raise ConfigError(f"config {text!r} is neither a file nor a recipe{closest}; {_listing()}")


def _stem(name: str) -> str:
    """``tiny.yaml`` -> ``tiny``; other names unchanged."""
    return name.rsplit(".", 1)[0] if name.endswith(_SUFFIXES) else name


def _listing() -> str:
    return f"recipes: {', '.join(recipe_names())} (neural-arch recipes NAME prints one), or a YAML file's path"
