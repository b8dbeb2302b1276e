"""The launcher's command-line entry: ``python -m neural_arch.distributed.launcher`` and
``neural-arch launch`` run ``main`` here.

Why apart from ``launch.main``: the command line is parsed first, without torch (``args.py``),
so ``--help`` and a usage mistake answer at once; only a command that will start a job pays
for importing torch elastic (seconds on a busy machine) with ``launch.py``.
"""

from __future__ import annotations

import sys
from typing import Sequence

from neural_arch.distributed.launcher.args import PROG, parse_launch_args


def main(argv: Sequence[str], prog: str = PROG) -> int:
    """``launch.main(argv, prog)``, after answering ``--help`` (exit 0) and refusing a usage
    mistake (one line, exit 2, as ``launch.main`` words it) without importing torch."""
    try:
        parse_launch_args(argv, prog)  # --help prints and raises SystemExit(0)
    except ValueError as exc:  # LaunchUsageError, or a bad PET_* variable
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    from neural_arch.distributed.launcher.launch import main as launch_main

    return launch_main(argv, prog)
