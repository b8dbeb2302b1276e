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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatch ``neural-arch SUBCOMMAND ...``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="neural-arch", description="Exact, fault-tolerant distributed training.")
    parser.add_argument("command", choices=["launch", "env"], help="launch: start a distributed job; env: show the detected environment")
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if args else 2
    if args[0] not in ("launch", "env"):
        print(f"neural-arch: error: unknown command {args[0]!r}; use one of: launch, env", file=sys.stderr)
        return 2
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
