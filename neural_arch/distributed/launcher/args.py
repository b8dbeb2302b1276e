"""Parse launcher command lines: torchrun's flag set (torch 2.13, both spellings) plus ours,
in torchrun's order or script first.

``python -m neural_arch.distributed.launcher --nproc-per-node=2 train.py --lr 0.1``  (torchrun)
``python -m neural_arch.distributed.launcher train.py --nproc_per_node=2 --lr 0.1``  (script first)
``python -m neural_arch.distributed.launcher -m my_pkg.train --lr 0.1``  (a module, as ``python -m``)

Rules: everything after a bare ``--`` goes to the script. If any launcher option comes
before the script, the torchrun order applies and everything after the script is the
script's. Otherwise (script first) long launcher options after the script are the
launcher's and all other arguments are the script's. Long option names accept ``_`` or
``-``. Mistakes raise ``LaunchUsageError`` (one line; unknown options get "did you mean").
"""

from __future__ import annotations

import argparse
import difflib
from typing import NoReturn, Optional, Sequence

from neural_arch.distributed.launcher.options import add_options
from neural_arch.utils.docs_site import docs_pointer

PROG = "python -m neural_arch.distributed.launcher"


class LaunchUsageError(ValueError):
    """A command-line mistake: the CLI prints it as one line and exits 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block + exit
        raise LaunchUsageError(message)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The launcher's options (shared with ``neural-arch launch``); ``--help`` shows every default."""
    p = _Parser(
        prog=prog,
        allow_abbrev=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Start N worker processes per node running SCRIPT (a Python file, a module with -m, "
        "or an executable with --no-python), restarted as a group on failure. Accepts torchrun's options.",
        epilog=docs_pointer("launcher.md"),
    )
    add_options(p)
    p.add_argument(
        "script", help="the Python script (or module with -m, executable with --no-python) every worker runs"
    )
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def _spellings(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every option string, long ones also with ``_`` and ``-`` swapped, -> its action."""
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:
        for text in action.option_strings:
            found[text] = action
            if text.startswith("--"):
                found["--" + text[2:].replace("_", "-")] = action
                found["--" + text[2:].replace("-", "_")] = action
    return found


def _lookup(token: str, known: dict[str, argparse.Action], short: bool) -> Optional[argparse.Action]:
    if token.startswith("--"):
        return known.get(token.split("=", 1)[0])
    if short and len(token) >= 2:  # -m, -r3, -t 3
        return known.get(token[:2])
    return None


def _take(tokens: list[str], i: int, action: argparse.Action, ours: list[str]) -> int:
    """Move option ``tokens[i]`` (and its value, if separate) to ``ours``; the next index."""
    token = tokens[i]
    ours.append(token)
    attached = "=" in token if token.startswith("--") else len(token) > 2
    if action.nargs != 0 and not attached:
        if i + 1 >= len(tokens):
            raise LaunchUsageError(f"launcher option {token} needs a value")
        ours.append(tokens[i + 1])
        return i + 2
    return i + 1


def _unknown(token: str, known: dict[str, argparse.Action]) -> LaunchUsageError:
    name = token.split("=", 1)[0]
    longs = sorted({k for k in known if k.startswith("--") and "_" not in k})
    close = difflib.get_close_matches(name.replace("_", "-"), longs, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else "; see --help"
    return LaunchUsageError(f"unknown launcher option {token!r}{hint} (script options go after the script or after --)")


def split_argv(
    argv: Sequence[str], parser: Optional[argparse.ArgumentParser] = None
) -> tuple[list[str], str, list[str]]:
    """(launcher options, script, script args) from a command line in either order."""
    known = _spellings(parser or build_parser())
    argv = list(argv)
    tail: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    ours: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in ("-h", "--help"):
            return [argv[i]], "", []
        action = _lookup(argv[i], known, short=True)
        if action is None:
            raise _unknown(argv[i], known)
        i = _take(argv, i, action, ours)
    if i >= len(argv):
        if tail:  # `launcher [opts] -- script args`
            return ours, tail[0], tail[1:]
        raise LaunchUsageError(f"no script given: {PROG} [options] SCRIPT [args]")
    script, rest = argv[i], argv[i + 1 :]
    if ours:  # torchrun order: the rest belongs to the script
        return ours, script, rest + tail
    script_args: list[str] = []
    j = 0
    while j < len(rest):  # script first: pick our long options out of the rest
        action = _lookup(rest[j], known, short=False)
        if action is None or action.dest == "help":
            script_args.append(rest[j])
            j += 1
        else:
            j = _take(rest, j, action, ours)
    return ours, script, script_args + tail


def parse_launch_args(argv: Sequence[str], prog: str = PROG) -> argparse.Namespace:
    """Parse a launcher command line (either order) into an argparse namespace."""
    parser = build_parser(prog)
    ours, script, script_args = split_argv(argv, parser)
    if ours[:1] in (["-h"], ["--help"]):
        parser.print_help()
        raise SystemExit(0)
    # Normalise spellings argparse was not given (--rank0-only for --rank0_only, ...).
    known = _spellings(parser)
    fixed = [_canonical(token, known) for token in ours]
    ns = parser.parse_args(fixed + ["--", script])
    ns.script_args = script_args
    return ns


def _canonical(token: str, known: dict[str, argparse.Action]) -> str:
    if not token.startswith("--"):
        return token
    name, eq, value = token.partition("=")
    action = known.get(name)
    return action.option_strings[0] + eq + value if action is not None and name not in action.option_strings else token
