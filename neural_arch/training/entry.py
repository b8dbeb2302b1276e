"""Per-worker entry of ``neural-arch train``: parse the arguments, train, exit.

The CLI runs this file on every worker (through the launcher when it starts the
processes itself; directly under torchrun, srun or mpirun):
``python neural_arch/training/entry.py --config FILE [--set k=v ...] [--resume auto|none|PATH]``.
Config mistakes exit 2 with one line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence


def parser() -> argparse.ArgumentParser:
    """Arguments shared by ``neural-arch train`` and this entry."""
    p = argparse.ArgumentParser(prog="neural-arch train", description="Train a model from a YAML config.")
    p.add_argument("--config", default=None, help="YAML config file (default: built-in defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (repeatable), e.g. --set optim.lr=0.01")
    p.add_argument("--resume", default=None, help="auto (newest good checkpoint, default), none, or a checkpoint path")
    p.add_argument("--create-data", action="store_true",
                   help="create the dataset at data.path first if it does not exist (icenet)")
    p.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", type=int, default=None,
                   help="processes on this node (default: training.nproc_per_node)")
    return p


def check_data_exists(cfg: object, create_data: bool) -> None:
    """A missing icenet store is a user mistake unless --create-data was given."""
    from pathlib import Path

    from neural_arch.training.config import ConfigError

    data = cfg.data  # type: ignore[attr-defined]
    if data.name == "icenet" and not create_data and not Path(data.path).exists():
        raise ConfigError(f"data.path={data.path!r}: no IceNet data there; create it with `neural-arch create-data "
                          "--config FILE` or add --create-data to the train command")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ns = parser().parse_args(argv)
    from neural_arch.distributed.env import detect_cluster_env
    from neural_arch.training.config import ConfigError, load_config
    from neural_arch.training.trainer import train

    try:
        cfg = load_config(ns.config, ns.overrides, world_size=detect_cluster_env().world_size)
        check_data_exists(cfg, ns.create_data)
    except ConfigError as exc:
        print(f"neural-arch train: error: {exc}", file=sys.stderr)
        return 2
    train(cfg, resume=ns.resume, create_data=ns.create_data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
