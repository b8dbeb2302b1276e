"""``neural-arch env``: what this process would detect, for bug reports.

Run: ``neural-arch env`` (or ``srun neural-arch env``): cluster, ranks, backend, versions, a
free port, threads. A malformed launcher variable (e.g. ``RANK=abc``) exits 2 naming it.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from typing import Sequence

from neural_arch.cli.usage import command_parser, run_reporting

PROG = "neural-arch env"


def report_lines() -> list[str]:
    """The lines ``neural-arch env`` prints."""
    import torch
    import torch.distributed as dist

    from neural_arch import __version__
    from neural_arch.distributed.env import detect_cluster_env
    from neural_arch.distributed.runtime.process_group import default_backend
    from neural_arch.utils.ports import free_port

    cluster = detect_cluster_env()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [
        f"cluster:          {cluster.source}",
        f"rank:             {cluster.rank} of {cluster.world_size} "
        f"(local {cluster.local_rank} of {cluster.local_world_size})",
        f"node:             {cluster.node_rank} of {cluster.num_nodes} ({socket.gethostname()})",
        f"master:           {cluster.master_addr or '-'}:{cluster.master_port or '-'}",
        f"job id:           {cluster.job_id or '-'}",
        f"backend:          {cluster.backend or default_backend()} (gloo {dist.is_gloo_available()}, "
        f"nccl {dist.is_nccl_available()}, mpi {dist.is_mpi_available()})",
        f"GPUs:             {gpus}",
        f"threads:          torch {torch.get_num_threads()}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, cores {os.cpu_count()}",
        f"free port:        {free_port()} (127.0.0.1)",
        f"versions:         neural_arch {__version__}, torch {torch.__version__}, python {platform.python_version()}",
        f"platform:         {platform.platform()}",
    ]


def main(argv: Sequence[str]) -> int:
    command_parser("env", "Show the detected cluster environment.", "clusters.md").parse_args(argv)

    def show() -> int:
        # one write: under `| head -5` with PYTHONUNBUFFERED, print's separate newline could
        # land after the reader has gone and raise BrokenPipeError
        sys.stdout.write("\n".join(report_lines()) + "\n")
        sys.stdout.flush()
        return 0

    return run_reporting(PROG, show, ValueError)
