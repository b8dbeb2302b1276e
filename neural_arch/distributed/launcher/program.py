"""What a worker runs: a Python file, a module (``-m``) or an executable (``--no-python``), each
exactly as ``python -u script.py``, ``python -u -m module`` or the program itself would run
under torchrun.

Use: ``check_program("train.py", "script")`` before starting anything (the launcher's
preflight: a typo exits 2 at once, not N tracebacks later); inside a worker (``worker.py``),
``run_python(script, args, run_as)`` runs the script in this interpreter (its exceptions
propagate, as from python) and ``exec_program(program, args)`` replaces the worker with the
program.

What "exactly" means for a Python file, as Python 3.10+ itself does it: ``__main__`` is a fresh
module whose ``__file__`` is the path as given made absolute (not resolved), ``sys.argv[0]`` the
path as given, ``sys.path[0]`` the script's real directory (none with ``-P``/PYTHONSAFEPATH),
the code compiled with none of the wrapper's ``__future__`` flags, ``sys.orig_argv`` as
``python -u script.py ...``; a directory or zip file runs its ``__main__.py``. What the worker
wrapper imported for itself is gone from ``sys.modules`` before this runs (worker.py), so the
script starts with what ``python -u script.py`` starts with: a script that sets
``OMP_NUM_THREADS`` before ``import torch`` gets its threads.

Imports only the standard library: it is loaded before the script (worker.py).
"""

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn, Sequence


def check_program(script: str, run_as: str) -> None:
    """``ValueError`` naming what is wrong when ``script`` cannot be run ``run_as``."""
    if run_as == "module":
        try:
            found = importlib.util.find_spec(script)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise ValueError(
                f"module {script!r} not found (with -m the script is a module name, e.g. my_pkg.train, "
                "importable from the current directory)."
            )
    elif run_as == "executable":
        if shutil.which(script) is None:
            raise ValueError(
                f"executable {script!r} not found or not executable (with --no-python the script is a "
                "program: give its path or put it on PATH, and chmod +x it)."
            )
    elif not Path(script).is_file():
        raise ValueError(f"script {script!r} not found; pass the path of a Python file (or -m MODULE).")


def run_python(script: str, args: Sequence[str], run_as: str) -> None:
    """Run ``script`` in this interpreter as ``__main__``, as ``python -u [-m] script args`` would
    (exceptions propagate; ``__main__`` stays the script's module afterwards, as it does under
    python, for the ``atexit`` handlers and pickling that use it)."""
    flags = sys.orig_argv[: _flags_end()] if hasattr(sys, "orig_argv") else []
    main = _fresh_main()
    sys.argv = [script, *args]
    safe_path = bool(getattr(sys.flags, "safe_path", False))
    if run_as == "module":
        sys.orig_argv = [*flags, "-m", script, *args]
        if not safe_path:
            sys.path.insert(0, os.getcwd())  # as `python -m`: the current directory comes first
        import runpy  # as `python -m` does: runpy runs the module (and is in sys.modules, as there)

        runpy._run_module_as_main(script, alter_argv=True)  # type: ignore[attr-defined]
        return
    sys.orig_argv = [*flags, script, *args]
    path = os.path.join(os.getcwd(), script)  # absolute, not normalised or resolved: as python's __file__
    if os.path.isdir(script) or _is_zip(script):  # python runs the __main__.py inside
        sys.path.insert(0, script)
        import runpy

        runpy._run_module_as_main("__main__", alter_argv=False)  # type: ignore[attr-defined]
        return
    if not safe_path:
        sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
    external = sys.modules["_frozen_importlib_external"]
    with open(script, "rb") as f:
        source = f.read()
    if script.endswith(".pyc"):
        import marshal

        code = marshal.loads(source[16:])  # after the header: magic, flags, mtime/hash, size
        loader = external.SourcelessFileLoader("__main__", path)
    else:
        code = compile(source, path, "exec", dont_inherit=True)
        loader = external.SourceFileLoader("__main__", path)
    main.__dict__.update(__loader__=loader, __annotations__={}, __builtins__=sys.modules["builtins"])
    main.__dict__.update(__file__=path, __cached__=None)
    exec(code, main.__dict__)


def _fresh_main() -> object:
    """A new, empty ``__main__`` module in ``sys.modules`` (the worker wrapper's own is left
    to it). Its attributes in python's order: __name__, __doc__, __package__, __loader__, __spec__."""
    main = type(sys)("__main__")
    sys.modules["__main__"] = main
    return main


def _flags_end() -> int:
    """How many leading entries of ``sys.orig_argv`` are the interpreter and its options (``-u``),
    i.e. the index of the wrapper's path."""
    wrapper = sys.argv[0] if sys.argv else ""
    for i, arg in enumerate(sys.orig_argv):
        if i and arg == wrapper:
            return i
    return 1


def _is_zip(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def exec_program(program: str, args: Sequence[str]) -> NoReturn:
    """Replace this worker with ``program args`` (``--no-python``), as torchrun starts it: the same
    pid, output, CPU binding and tie to the launcher (lifeline.py), its own exit code and signals.
    A program that cannot be started exits 127 with one line, as a shell's would."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(program, [program, *args])
    except OSError as exc:
        print(f"launcher: cannot run {program!r}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
