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
"""

from neural_arch.distributed.launcher.args import LaunchUsageError, build_parser, parse_launch_args, split_argv
from neural_arch.distributed.launcher.config import LaunchConfig, config_from_args
from neural_arch.distributed.launcher.launch import (
    DistributedLauncher,
    check_port_free,
    launch_distributed_training,
    main,
)

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
