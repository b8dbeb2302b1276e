"""The ``neural-arch`` command: a thin dispatcher, one module per subcommand.

Run: ``neural-arch train --config tiny`` (train.py), ``neural-arch recipes [NAME]`` (recipes.py),
``neural-arch launch --nproc_per_node=2 script.py`` (launch.py), ``neural-arch create-data --config FILE``
(create_data.py), ``neural-arch evaluate RUN_DIR`` (evaluate.py),
``neural-arch export --checkpoint DIR --output model.ts`` (export.py),
``neural-arch generate --checkpoint DIR --prompt TEXT`` (generate.py),
``neural-arch env`` (env.py); ``python -m neural_arch.cli ...`` is the same. The logic lives
in the package so it can be called from Python and tested; user mistakes of every
subcommand exit 2 with one line (usage.py).
"""

from __future__ import annotations

import importlib
import sys
from typing import Optional, Sequence

from neural_arch.cli.usage import docs_pointer, print_usage_error
from neural_arch.training.typed_config import hint

COMMANDS = {
    "train": ("train", "train from a YAML config or a recipe's name"),
    "recipes": ("recipes", "list the shipped config recipes, or print one"),
    "create-data": ("create_data", "create the dataset a config's task trains on"),
    "evaluate": ("evaluate", "the validation metrics of a checkpoint, on any layout"),
    "export": ("export", "export a checkpoint to TorchScript for C++"),
    "generate": ("generate", "continue a prompt with a trained language model"),
    "launch": ("launch", "start a distributed job (same as python -m neural_arch.distributed.launcher)"),
    "env": ("env", "show the detected environment"),
}
"""Subcommand -> (module in neural_arch.cli, one-line description)."""


def usage() -> str:
    lines = [
        "usage: neural-arch SUBCOMMAND [options]   (neural-arch SUBCOMMAND --help for its options)",
        "",
        "subcommands:",
    ]
    commands = [f"  {name:12s} {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines + commands + ["", docs_pointer("getting-started.md")])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatch ``neural-arch SUBCOMMAND ...``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] not in COMMANDS:
        return print_usage_error(
            "neural-arch",
            f"unknown subcommand {args[0]!r}{hint(args[0], list(COMMANDS))}; use one of: {', '.join(COMMANDS)}",
        )
    module = importlib.import_module(f"neural_arch.cli.{COMMANDS[args[0]][0]}")
    return module.main(args[1:])


def run() -> None:
    """The ``neural-arch`` program (``python -m neural_arch.cli`` too): ``main``, then exit without
    the interpreter's teardown, 1-3 s with torch loaded on a busy machine (utils/fast_exit.py)."""
    from neural_arch.utils.fast_exit import exit_now

    exit_now(main())
