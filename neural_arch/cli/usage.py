"""How every ``neural-arch`` subcommand reports a user's mistake: one line, exit status 2.

Use in a subcommand module::

    parser = command_parser("train", "Train a model from a YAML config.", "trainer.md")
    ...
    return run_reporting(PROG, lambda: do_the_work(ns), ConfigError)

Argparse errors (unknown option, missing value) go through the same path, so every
mistake reads ``neural-arch SUBCOMMAND: error: ...`` with no usage block and no traceback.
Only the exception types a command names are user errors; anything else is a bug and keeps
its traceback. Every ``--help`` ends with ``details: URL``, the documentation site's page that
explains the command (``docs_pointer``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn

from neural_arch.utils.docs_site import docs_pointer

USAGE_EXIT = 2
"""Exit status of a usage error (argparse's and the shell convention)."""


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line ``PROG: error: MESSAGE`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        print_usage_error(self.prog, f"{message} (see {self.prog} --help)")
        sys.exit(USAGE_EXIT)


def command_parser(subcommand: str, description: str, page: str) -> CommandParser:
    """The parser of ``neural-arch SUBCOMMAND``, its help ending with a pointer to ``page`` (docs_site.py);
    abbreviations off so a typo is never guessed."""
    return CommandParser(
        prog=f"neural-arch {subcommand}", description=description, epilog=docs_pointer(page), allow_abbrev=False
    )


def print_usage_error(prog: str, message: object) -> int:
    """Print ``PROG: error: MESSAGE`` as one line on stderr; returns the usage exit status."""
    text = " ".join(str(message).split("\n"))
    print(f"{prog}: error: {text}", file=sys.stderr, flush=True)
    _tell_launcher(f"{prog}: error: {text}")
    return USAGE_EXIT


def _tell_launcher(line: str) -> None:
    """Under our launcher, say that this exit 2 is a usage error (``launcher/channel.py``): the
    launcher then does not restart it, as it restarts a script's own exit 2. Elsewhere (torchrun,
    a shell) the channel is not open and this does nothing. Standard library only (the package
    exports lazily): a one-line error does not wait for torch."""
    from neural_arch.distributed.launcher.channel import USAGE, tell

    tell(USAGE, line)


def run_reporting(prog: str, work: Callable[[], int], *user_errors: type[BaseException]) -> int:
    """``work()``'s exit status, or 2 after one line if it raised one of ``user_errors``."""
    try:
        return work()
    except user_errors as exc:
        return print_usage_error(prog, exc)
