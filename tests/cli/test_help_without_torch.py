"""``--help`` and usage errors of ``neural-arch`` subcommands answer without importing torch.

Run: ``.venv/bin/python -m pytest tests/cli/test_help_without_torch.py -q`` (about 2 s: two fresh processes).
torch costs seconds to import (3-6 s on a loaded machine); asking a command's options or mistyping
one must not pay them. All the cases run in one fresh interpreter, each checked for torch in
``sys.modules`` right after it, so the first case that imports it is named. ``launch`` parses its
command line before it imports torch elastic (neural_arch/distributed/launcher/entry.py), and
``python -m neural_arch.distributed.launcher --help`` is checked the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys

from neural_arch.cli import COMMANDS

CASES = [["--help"], ["no-such-command"]]
CASES += [[name, "--help"] for name in COMMANDS]
CASES += [
    ["train", "--no-such-option"],
    ["train", "--nproc-per-node", "many"],
    ["train", "--nproc-per-node", "0"],
    ["evaluate"],  # PATH missing
    ["evaluate", "runs/x", "--nproc-per-node", "-1"],
    ["create-data", "--no-such-option"],
    ["export"],
    ["generate"],
    ["launch", "--no-such-option", "script.py"],
    ["launch"],  # no script
    ["launch", "--nproc-per-node", "x", "script.py"],  # counting auto/gpu needs torch; a bad spelling does not
    ["launch", "--nproc_per_node=0", "script.py"],
]

PROBE = """
import contextlib, io, json, sys
from neural_arch.cli import main
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code
    if "torch" in sys.modules:
        print(json.dumps(["torch", argv]))
        break
    print(json.dumps([code, argv]))
"""


def test_help_and_usage_errors_do_not_import_torch():
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(CASES)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    imported = [argv for code, argv in answers if code == "torch"]
    assert not imported, f"neural-arch {' '.join(imported[0])} imported torch"
    assert [argv for _, argv in answers] == CASES
    codes = {" ".join(argv): code for code, argv in answers}
    assert all(code == 0 for argv, code in codes.items() if argv.endswith("--help")), codes
    assert all(code == 2 for argv, code in codes.items() if not argv.endswith("--help")), codes


LAUNCHER_PROBE = """
import runpy, sys
sys.argv = ["launcher", "--help"]
try:
    runpy.run_module("neural_arch.distributed.launcher", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    print(stop.code, "torch" in sys.modules)
"""


def test_launcher_module_help_does_not_import_torch():
    proc = subprocess.run([sys.executable, "-c", LAUNCHER_PROBE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--nproc-per-node" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "0 False"
