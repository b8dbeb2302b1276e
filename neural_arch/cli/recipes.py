"""``neural-arch recipes``: the ready-to-run configs shipped with the package.

Run: ``neural-arch recipes`` lists every recipe with its first comment line;
``neural-arch recipes tiny`` prints that YAML file (copy it to start your own:
``neural-arch recipes tiny > my.yaml``). Any of them trains with ``neural-arch train --config NAME``.
An unknown name exits 2 with one line listing the recipes.
"""

from __future__ import annotations

from typing import Sequence

from neural_arch.cli.usage import command_parser, run_reporting
from neural_arch.training.recipes import recipe_names, recipe_path
from neural_arch.training.typed_config import ConfigError

PROG = "neural-arch recipes"


def listing() -> str:
    """One line per recipe: its name and what its first comment line says it is."""
    lines = []
    for name in recipe_names():
        first = recipe_path(name).read_text(encoding="utf-8").splitlines()[:1]
        about = first[0].lstrip("# ").strip() if first and first[0].startswith("#") else ""
        lines.append(f"  {name:12s} {about}".rstrip())
    return "\n".join(["recipes (neural-arch train --config NAME; neural-arch recipes NAME prints one):", *lines])


def main(argv: Sequence[str]) -> int:
    parser = command_parser("recipes", "List the shipped config recipes, or print one.", "config.md")
    parser.add_argument("name", nargs="?", default=None, help="a recipe to print, e.g. tiny")
    ns = parser.parse_args(argv)

    def show() -> int:
        text = listing() if ns.name is None else recipe_path(ns.name).read_text(encoding="utf-8").rstrip("\n")
        print(text)
        return 0

    return run_reporting(PROG, show, ConfigError)
