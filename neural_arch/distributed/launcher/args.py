"""Parse launcher command lines as torchrun (torch 2.13) does: launcher options, the script,
then the script's own arguments.

``python -m neural_arch.distributed.launcher --nproc-per-node=2 train.py --lr 0.1``
``neural-arch launch --nproc_per_node 2 -m my_pkg.train --lr 0.1``  (a module, as ``python -m``)

Rules (torchrun's: argparse with the script as a positional and ``REMAINDER`` after it):
launcher options come before the script (a unique prefix of an option's name stands for it,
as in argparse); everything after the script is the script's, even
an option the launcher also has (``train.py --backend gloo`` gives the script
``--backend gloo``); a bare ``--`` before the script ends the launcher options. Every torchrun
option's default comes from its ``PET_<OPTION>`` variable when that is set
(``env/torchrun_options.py``); the command line wins. Long option names accept ``_`` or
``-``; a ``--`` right after the script is dropped, as torchrun's argparse does. Mistakes
raise ``LaunchUsageError`` (one line; unknown options get "did you mean").
"""

from __future__ import annotations

import argparse
import difflib
from typing import Mapping, NoReturn, Optional, Sequence

from neural_arch.distributed.launcher.nproc import nproc_spelling
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


def _unabbreviated(token: str, parser: argparse.ArgumentParser) -> str:
    """``--stand`` -> ``--standalone``: a unique prefix of one option string stands for it, as in
    torchrun's argparse parser; a prefix of several is refused as argparse refuses it."""
    name, eq, value = token.partition("=")
    if not name.startswith("--") or name in parser._option_string_actions:
        return token
    matches = sorted(text for text in parser._option_string_actions if text.startswith(name) and len(name) > 2)
    if len(matches) > 1:
        raise LaunchUsageError(f"ambiguous option: {name} could match {', '.join(matches)}")
    return matches[0] + eq + value if matches else token


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
    return LaunchUsageError(f"unknown launcher option {token!r}{hint} (script options go after the script)")


def split_argv(
    argv: Sequence[str], parser: Optional[argparse.ArgumentParser] = None
) -> tuple[list[str], str, list[str]]:
    """(launcher options, script, script args): the options before the script are the
    launcher's, everything after it the script's (torchrun's rule)."""
    parser = parser or build_parser()
    known = _spellings(parser)
    argv = list(argv)
    ours: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        argv[i] = _unabbreviated(argv[i], parser)
        if argv[i] == "--":  # `launcher [opts] -- script args`
            if i + 1 >= len(argv):
                break
            return ours, argv[i + 1], argv[i + 2 :]
        if argv[i] in ("-h", "--help"):
            return [argv[i]], "", []
        action = _lookup(argv[i], known, short=True)
        if action is None:
            raise _unknown(argv[i], known)
        i = _take(argv, i, action, ours)
    if i >= len(argv) or argv[i] == "--":
        raise LaunchUsageError(f"no script given: {parser.prog} [options] SCRIPT [args]")
    rest = argv[i + 1 :]
    # argparse (torchrun's parser, Python 3.11) drops a `--` right after the script, and keeps any later one.
    return ours, argv[i], rest[1:] if rest[:1] == ["--"] else rest


def seed_order(argv: Sequence[str], parser: Optional[argparse.ArgumentParser] = None) -> list[str]:
    """The seeds' order for ``python -m neural_arch.distributed.launcher`` (seed 003: ``launcher
    train.py --nproc_per_node=8 --backend=nccl``) in torchrun's: when the script comes first and
    every token after it is a long launcher option (with its value), they are the launcher's and
    move before the script. Anything else is left as torchrun reads it, so a script argument that
    is not a launcher option (``train.py --epochs 3 --backend gloo``) keeps all of them for the
    script; ``neural-arch launch`` follows torchrun alone."""
    argv = list(argv)
    if len(argv) < 2 or argv[0].startswith("-"):
        return argv
    known = _spellings(parser or build_parser())
    moved: list[str] = []
    i = 1
    while i < len(argv):
        action = _lookup(argv[i], known, short=False)
        if action is None or action.dest == "help":
            return argv
        try:
            i = _take(argv, i, action, moved)
        except LaunchUsageError:
            return argv
    return [*moved, argv[0]]


LAUNCHER_ONLY = frozenset(
    ("nproc_per_node", "nnodes", "node_rank", "max_restarts", "standalone", "rdzv_backend", "rdzv_endpoint", "run_id")
)
"""Options a script rarely has: after the script, one of them is more likely a launcher option in
the wrong place (the seeds' order), which the launcher notes (it still goes to the script)."""


def misplaced_options(script_args: Sequence[str], parser: Optional[argparse.ArgumentParser] = None) -> list[str]:
    """The script's arguments that name a launcher-only option (``--nproc_per_node=2``), for a note."""
    known = _spellings(parser or build_parser())
    found = []
    for token in script_args:
        action = _lookup(token, known, short=False)
        if action is not None and action.dest in LAUNCHER_ONLY:
            found.append(token)
    return found


def apply_pet_defaults(parser: argparse.ArgumentParser, environ: Optional[Mapping[str, str]] = None) -> None:
    """Make every torchrun option's ``PET_<OPTION>`` variable its default, as torchrun's parser
    does (``env/torchrun_options.py``); ``LaunchUsageError`` naming a variable whose value is bad."""
    from neural_arch.distributed.env.torchrun_options import pet_options

    known = _spellings(parser)
    for pet in pet_options(environ):
        action = known.get("--" + pet.option)
        if action is None:  # a torchrun option this parser lacks: nothing reads it
            continue
        if pet.flag:
            try:
                value: object = pet.flag_value()
            except ValueError as exc:
                raise LaunchUsageError(str(exc)) from None
        else:
            try:
                value = action.type(pet.value) if callable(action.type) else pet.value
            except ValueError:
                raise LaunchUsageError(
                    f"{pet.variable}={pet.value!r} is not a valid {action.option_strings[0]} "
                    f"({getattr(action.type, '__name__', 'value')} expected); fix or unset it."
                ) from None
        parser.set_defaults(**{action.dest: value})


def parse_launch_args(
    argv: Sequence[str], prog: str = PROG, environ: Optional[Mapping[str, str]] = None
) -> argparse.Namespace:
    """Parse a launcher command line into an argparse namespace; torchrun's ``PET_*`` variables
    of ``environ`` (default: this process's) are the defaults."""
    parser = build_parser(prog)
    apply_pet_defaults(parser, environ)
    ours, script, script_args = split_argv(argv, parser)
    if ours[:1] in (["-h"], ["--help"]):
        parser.print_help()
        raise SystemExit(0)
    # Normalise spellings argparse was not given (--rank0-only for --rank0_only, ...).
    known = _spellings(parser)
    fixed = [_canonical(token, known) for token in ours]
    ns = parser.parse_args(fixed + ["--", script])
    ns.script_args = script_args
    _check_nproc(ns.nproc_per_node, given=any(_dest(token, known) == "nproc_per_node" for token in fixed))
    return ns


def _dest(token: str, known: dict[str, argparse.Action]) -> str:
    action = known.get(token.split("=", 1)[0])
    return action.dest if action is not None else ""


def _check_nproc(value: str, given: bool) -> None:
    """Refuse a mistyped worker count here, by its spelling: counting ``auto``/``gpu`` needs torch
    (``config.parse_nproc``), which a usage error must not import. ``given``: on the command line,
    else it came from torchrun's variable."""
    from neural_arch.distributed.env.torchrun_options import PREFIX

    try:
        nproc_spelling(value, "--nproc-per-node" if given else f"{PREFIX}NPROC_PER_NODE")
    except ValueError as exc:
        raise LaunchUsageError(str(exc)) from None


def _canonical(token: str, known: dict[str, argparse.Action]) -> str:
    if not token.startswith("--"):
        return token
    name, eq, value = token.partition("=")
    action = known.get(name)
    return action.option_strings[0] + eq + value if action is not None and name not in action.option_strings else token
