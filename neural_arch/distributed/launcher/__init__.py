"""Start a distributed job: N workers per node, each rank's output logged, the whole group
restarted when one fails, and a summary naming the rank that started the trouble.

Use: ``python -m neural_arch.distributed.launcher --nproc_per_node=2 train.py --lr 0.1``
(launcher options before the script, everything after it the script's, as torchrun), or from
Python ``DistributedLauncher(LaunchConfig(nproc_per_node=2)).launch("train.py", "--lr", "0.1")``.

Concern: the processes of a job. ``args.py`` parses the command line (torchrun's rules),
``config.py`` holds ``LaunchConfig``, ``launch.py`` drives torch elastic with our
``agent.py``; every worker runs ``worker.py``, whose output goes (``output.py``) through
``logpump.py`` to the console, torchrun's log files and ``rank_N.log`` (format in
``log_format.py``), which ``failures.py`` reads back.

Every name is imported on first use (PEP 562 ``__getattr__``): ``args.py`` (the parser) loads
without torch, so ``--help`` and a mistyped option answer in a fraction of a second, while
``launch.py`` brings in torch elastic. The ``TYPE_CHECKING`` imports give type checkers the names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neural_arch.utils.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from neural_arch.distributed.launcher.args import LaunchUsageError, build_parser, parse_launch_args, split_argv
    from neural_arch.distributed.launcher.config import LaunchConfig, config_from_args
    from neural_arch.distributed.launcher.launch import (
        DistributedLauncher,
        check_port_free,
        launch_distributed_training,
        main,
    )

_WHERE = {
    **dict.fromkeys(("LaunchUsageError", "build_parser", "parse_launch_args", "split_argv"), "args"),
    **dict.fromkeys(("LaunchConfig", "config_from_args"), "config"),
    **dict.fromkeys(("DistributedLauncher", "check_port_free", "launch_distributed_training", "main"), "launch"),
}
"""Public name -> the module that defines it."""


__getattr__ = lazy_getattr(__name__, _WHERE, globals())

__all__ = [
    "DistributedLauncher",
    "LaunchConfig",
    "LaunchUsageError",
    "build_parser",
    "check_port_free",
    "config_from_args",
    "launch_distributed_training",
    "main",
    "parse_launch_args",
    "split_argv",
]
