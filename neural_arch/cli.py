"""The ``neural-arch`` command: a thin dispatcher over the package.

Run: ``neural-arch launch --nproc_per_node=2 train.py`` (same as
``python -m neural_arch.distributed.launcher``) or ``neural-arch env`` (what this process
would detect: cluster, ranks, backend, versions, a free port, threads; paste it into bug
reports). User mistakes exit 2 with one line and no traceback.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import sys
from typing import Optional, Sequence


def _env_report() -> list[str]:
    import torch
    import torch.distributed as dist

    from neural_arch import __version__
    from neural_arch.distributed.env import detect_cluster_env
    from neural_arch.distributed.process_group import default_backend

    cluster = detect_cluster_env()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [
        f"cluster:          {cluster.source}",
        f"rank:             {cluster.rank} of {cluster.world_size} (local {cluster.local_rank} of {cluster.local_world_size})",
        f"node:             {cluster.node_rank} of {cluster.num_nodes} ({socket.gethostname()})",
        f"master:           {cluster.master_addr or '-'}:{cluster.master_port or '-'}",
        f"job id:           {cluster.job_id or '-'}",
        f"backend:          {cluster.backend or default_backend()} (gloo {dist.is_gloo_available()}, nccl {dist.is_nccl_available()}, mpi {dist.is_mpi_available()})",
        f"GPUs:             {gpus}",
        f"threads:          torch {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, cores {os.cpu_count()}",
        f"free port:        {port} (127.0.0.1)",
        f"versions:         neural_arch {__version__}, torch {torch.__version__}, python {platform.python_version()}",
        f"platform:         {platform.platform()}",
    ]


COMMANDS = {
    "train": "train from a YAML config",
    "create-data": "create the dataset a config names (icenet)",
    "export": "export a checkpoint to TorchScript for C++",
    "launch": "start a distributed job",
    "env": "show the detected environment",
}


def create_data_command(argv: Sequence[str]) -> int:
    """``neural-arch create-data --config FILE [--set ...]``: write the icenet store (split
    over the ranks when started under a launcher, srun or mpirun)."""
    from neural_arch.training import entry
    from neural_arch.training.config import ConfigError, load_config

    ns = entry.parser().parse_args(argv)
    try:
        cfg = load_config(ns.config, ns.overrides)
        if cfg.data.name != "icenet":
            raise ConfigError(f"data.name={cfg.data.name!r}: only icenet data is created ahead of training")
    except ConfigError as exc:
        print(f"neural-arch create-data: error: {exc}", file=sys.stderr)
        return 2
    import neural_arch.distributed as nd
    from neural_arch.training.task_icenet import create_data

    nd.init_process_group()
    path = create_data(cfg)
    if nd.get_rank() == 0:
        print(f"created {path} on {nd.get_world_size()} process(es)")
    nd.destroy_process_group()
    return 0


def train_command(argv: Sequence[str]) -> int:
    """``neural-arch train``: train here, or start N workers through our launcher (restarts on)."""
    from pathlib import Path

    from neural_arch.distributed.env import detect_cluster_env
    from neural_arch.distributed.launcher import DistributedLauncher, LaunchConfig
    from neural_arch.training import entry
    from neural_arch.training.config import ConfigError, load_config

    ns = entry.parser().parse_args(argv)
    cluster = detect_cluster_env()
    try:
        cfg = load_config(ns.config, ns.overrides)
        entry.check_data_exists(cfg, ns.create_data)
        nproc = ns.nproc_per_node or cfg.training.nproc_per_node
        if nproc > 1 and cluster.world_size == 1:
            load_config(ns.config, ns.overrides, world_size=nproc)  # batch divisibility, before any process starts
            launcher = LaunchConfig(
                nproc_per_node=nproc, max_restarts=cfg.training.max_restarts, timeout=cfg.training.timeout,
                backend=None if cfg.training.backend == "auto" else cfg.training.backend,
                log_dir=str(Path(cfg.run.dir) / "logs" / "console"), rank0_only=True,
            )
            return DistributedLauncher(launcher).launch(entry.__file__, *_without_nproc(list(argv)))
    except ConfigError as exc:
        print(f"neural-arch train: error: {exc}", file=sys.stderr)
        return 2
    return entry.main(_without_nproc(list(argv)))


def _without_nproc(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--nproc-per-node", "--nproc_per_node"):
            skip = True
            continue
        if arg.startswith(("--nproc-per-node=", "--nproc_per_node=")):
            continue
        out.append(arg)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatch ``neural-arch SUBCOMMAND ...``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="neural-arch", description="Exact, fault-tolerant distributed training.")
    parser.add_argument("command", choices=list(COMMANDS), help="; ".join(f"{k}: {v}" for k, v in COMMANDS.items()))
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if args else 2
    if args[0] not in COMMANDS:
        print(f"neural-arch: error: unknown command {args[0]!r}; use one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if args[0] == "train":
        return train_command(args[1:])
    if args[0] == "create-data":
        return create_data_command(args[1:])
    if args[0] == "export":
        from neural_arch.export_cli import main as export_main

        return export_main(args[1:])
    if args[0] == "launch":
        from neural_arch.distributed.launcher import main as launch_main

        return launch_main(args[1:])
    try:
        print("\n".join(_env_report()))
    except ValueError as exc:  # e.g. RANK=abc: say what is wrong with the environment
        print(f"neural-arch env: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
