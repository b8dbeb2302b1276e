"""``neural-arch launch [options] script.py [args]``: start a distributed job.

The same as ``python -m neural_arch.distributed.launcher ...`` (see its ``--help``): N
workers per node under torch elastic, restarts, per-rank logs, a failure summary.
``--help`` and usage mistakes answer without importing torch (launcher/entry.py).
"""

from __future__ import annotations

from typing import Sequence


def main(argv: Sequence[str]) -> int:
    from neural_arch.distributed.launcher.entry import main as launcher_main

    return launcher_main(list(argv), prog="neural-arch launch")
