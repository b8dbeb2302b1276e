"""``neural-arch create-data --config FILE [--set ...]``: create the dataset a config names.

Run: ``neural-arch create-data --config NAME`` (a recipe, or a YAML file); under a launcher, srun or
mpirun every rank writes its share (the result is byte-identical at any world size). What
is created is the task's business (``Task.create_data``); config mistakes exit 2.
"""

from __future__ import annotations

from typing import Sequence

from neural_arch.cli.usage import command_parser, run_reporting
from neural_arch.training.typed_config import ConfigError

PROG = "neural-arch create-data"


def main(argv: Sequence[str]) -> int:
    from neural_arch.cli.train import add_config_arguments

    parser = command_parser("create-data", "Create the dataset the config's task trains on.", "trainer.md")
    add_config_arguments(parser)
    ns = parser.parse_args(argv)

    def create() -> int:
        import neural_arch.distributed as nd
        from neural_arch.training.config import load_config
        from neural_arch.training.registry import task_class

        cfg = load_config(ns.config, ns.overrides)
        task = task_class(cfg.run.task)
        nd.init_process_group()
        path = task.create_data(cfg)
        if nd.get_rank() == 0:
            print(f"created {path} on {nd.get_world_size()} process(es)")
        nd.destroy_process_group()
        return 0

    return run_reporting(PROG, create, ConfigError)
