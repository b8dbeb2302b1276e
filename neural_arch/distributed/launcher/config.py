"""How to start the workers of one node: ``LaunchConfig``, validated when it is built.

Use: ``LaunchConfig(nproc_per_node=2, max_restarts=1)``, passed to ``DistributedLauncher``;
``config_from_args(parse_launch_args(argv))`` builds one from a command line. Mistakes
raise ``ValueError`` naming the field, its value and what is allowed.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

import torch

from neural_arch.distributed.launcher import cpu_bind
from neural_arch.distributed.launcher import torchrun_compat as compat
from neural_arch.distributed.launcher.nproc import nproc_spelling


@dataclass
class LaunchConfig:
    """How to start the workers of one node."""

    nproc_per_node: Union[int, str] = 1
    """Workers on this node; ``"auto"`` = number of GPUs, else of CPU cores."""
    nnodes: Union[int, str] = 1
    """Nodes in the job: ``N``, or ``"MIN:MAX"`` for an elastic job."""
    node_rank: int = 0
    """This node's index, 0..N-1 (static multi-node jobs)."""
    master_addr: str = "127.0.0.1"
    """Host of node 0, where the rendezvous store runs."""
    master_port: Optional[int] = None
    """Port on node 0. One node: None or 0 = a free port chosen by the OS; several nodes: None =
    torchrun's defaults, 29500 (static rendezvous) or 29400 (c10d)."""
    backend: Optional[str] = None
    """Backend the workers' ``init_process_group()`` uses (None: nccl with GPUs, else gloo)."""
    max_restarts: int = 3
    """How often the whole group is restarted after a failure before the job fails."""
    monitor_interval: float = 0.1
    """Seconds between checks of the workers' health."""
    start_timeout: float = 600
    """Seconds to wait for all nodes to join the rendezvous."""
    log_dir: Optional[str] = None
    """Directory for ``rank_N.log`` (each rank's whole output, every attempt) and torchrun's layout:
    ``<run_id>_<random>/attempt_<k>/<local_rank>/error.json``, with ``stdout.log``/``stderr.log`` for
    the streams ``redirects``/``tee`` name."""
    timeout: Optional[float] = None
    """Collective timeout in seconds for the workers; a hung rank fails the group after it."""
    run_id: Optional[str] = None
    """Job id shared by all nodes (elastic jobs); default: derived from the master address."""
    job_token: Optional[str] = None
    """What a node must prove to join this multi-node job (default: job_token_file, then the
    NEURAL_ARCH_JOB_TOKEN variable, run_id, the scheduler's job id, e.g. SLURM_JOB_ID); the
    host refuses a node that cannot prove it."""
    job_token_file: Optional[str] = None
    """A file whose first line is the job token (keeps it out of the process's command line)."""
    rank0_only: bool = False
    """Show only rank 0's output on the console (all ranks still write their logs)."""
    verbose: bool = False
    """Also show torch elastic's own log lines (torch_logs.py); the launcher's messages show either way."""
    shutdown_timeout: int = 5
    """Seconds a stopping worker gets after SIGTERM before SIGKILL."""
    warm_spares: bool = False
    """Keep one spare worker per local rank with torch imported, so that a restart's workers skip
    the interpreter's start and torch's import (warm.py; memory: about 300 MB per spare)."""
    rdzv_backend: Optional[str] = None
    """None: automatic (one node: static on a free port; N nodes: static; MIN:MAX: c10d);
    ``"static"`` or ``"c10d"`` (nodes meet at master_addr:master_port, node ranks assigned)."""
    rdzv_conf: dict[str, str] = field(default_factory=dict)
    """More rendezvous settings (torchrun's --rdzv-conf), e.g. ``{"join_timeout": "900"}``."""
    local_addr: Optional[str] = None
    """This node's address for the rendezvous (None: its FQDN)."""
    role: str = "default"
    """The workers' role name (ROLE_NAME in their environment)."""
    run_as: Literal["script", "module", "executable"] = "script"
    """What the script argument is: a Python file, a module (``-m``), an executable (``--no-python``)."""
    console_local_ranks: Optional[tuple[int, ...]] = None
    """Local ranks whose output the console shows (None: all; --local-ranks-filter)."""
    redirects: str = "0"
    """torchrun's --redirects: streams (1 stdout, 2 stderr, 3 both; or ``0:3,1:2`` by local rank) that go
    to their ``stdout.log``/``stderr.log`` only, off the console."""
    tee: str = "0"
    """torchrun's --tee: streams that go to their ``stdout.log``/``stderr.log`` and the console."""
    output_prefix: str = "rank"
    """``"rank"``: every console line starts ``[rank N] ``; ``"torchrun"``: only a tee'd stream's lines,
    with ``[<role><local_rank>]:`` (or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE), as torchrun."""
    signals_to_handle: str = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    """Signals the launcher forwards to the workers."""
    event_log_handler: str = "null"
    """torch elastic's event log handler."""
    virtual_local_rank: bool = False
    """LOCAL_RANK=0 in every worker with CUDA_VISIBLE_DEVICES set to its GPU (torch elastic's mode)."""
    cpu_bind: str = "auto"
    """``"auto"``: each worker its own cores when the job fills the CPUs it may use (cpu_bind.py); ``"none"``."""
    loader_workers: Optional[int] = None
    """DataLoader worker processes each rank starts, for ``cpu_bind``: a rank is bound only to at least
    that many CPUs; None (unknown, a plain script): at least two, never one core (cpu_bind.py)."""

    def __post_init__(self) -> None:
        self.min_nodes, self.max_nodes = parse_nnodes(self.nnodes)
        self.nproc = parse_nproc(self.nproc_per_node)
        for name in ("node_rank", "max_restarts"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0.")
        if not self.c10d and self.node_rank >= self.max_nodes:
            raise ValueError(f"node_rank={self.node_rank} must be smaller than nnodes={self.max_nodes}.")
        if self.master_port is not None and not 0 <= self.master_port < 65536:
            raise ValueError(f"master_port={self.master_port} is not a TCP port (1..65535, or 0 for a free one).")
        if self.max_nodes > 1 and self.master_port == 0:
            raise ValueError(
                "port 0 (a free port) works on one node only: each node would pick its own port and none would "
                "meet; give every node the same port, e.g. --rdzv-endpoint=HOST:29400 or --master-port=29500."
            )
        if self.max_nodes > 1 and self.master_port is None:  # torchrun's defaults
            self.master_port = compat.DEFAULT_RDZV_PORT if self.c10d else compat.DEFAULT_MASTER_PORT
        for name in ("monitor_interval", "start_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)} must be > 0 seconds.")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout={self.timeout} must be > 0 seconds.")
        if self.backend not in (None, "auto", "gloo", "nccl"):
            raise ValueError(f"backend={self.backend!r} must be 'gloo', 'nccl' or None (auto).")
        self._check_torchrun_fields()

    @property
    def c10d(self) -> bool:
        """Whether the nodes meet in a c10d rendezvous (asked for, or an elastic ``MIN:MAX`` job),
        which assigns node ranks, rather than the static one, where ``node_rank`` says it."""
        return self.rdzv_backend == "c10d" or self.min_nodes != self.max_nodes

    def _check_torchrun_fields(self) -> None:
        if self.rdzv_backend not in (None, "static", "c10d"):
            raise ValueError(f"rdzv_backend={self.rdzv_backend!r} must be 'static', 'c10d' or None (automatic).")
        if self.run_as not in ("script", "module", "executable"):
            raise ValueError(f"run_as={self.run_as!r} must be 'script', 'module' or 'executable'.")
        compat.check_signals(self.signals_to_handle)
        compat.check_event_handler(self.event_log_handler)
        if self.loader_workers is not None and self.loader_workers < 0:
            raise ValueError(f"loader_workers={self.loader_workers} must be >= 0 (or None: unknown).")
        self.redirect_masks = compat.stream_masks(self.redirects, self.nproc, "redirects")
        self.tee_masks = compat.stream_masks(self.tee, self.nproc, "tee")
        if self.output_prefix not in ("rank", "torchrun"):
            raise ValueError(f"output_prefix={self.output_prefix!r} must be 'rank' or 'torchrun'.")
        if self.cpu_bind not in cpu_bind.MODES:
            raise ValueError(f"cpu_bind={self.cpu_bind!r} must be one of {', '.join(cpu_bind.MODES)}.")


def parse_nnodes(value: Union[int, str]) -> tuple[int, int]:
    """``"2"`` -> (2, 2); ``"1:4"`` -> (1, 4): the minimum and maximum number of nodes."""
    text = str(value)
    try:
        lo, _, hi = text.partition(":")
        low, high = int(lo), int(hi or lo)
    except ValueError:
        raise ValueError(f"nnodes={value!r} must be N or MIN:MAX, e.g. 2 or 1:4.") from None
    if not 1 <= low <= high:
        raise ValueError(f"nnodes={value!r} needs 1 <= MIN <= MAX.")
    return low, high


def parse_nproc(value: Union[int, str]) -> int:
    """Workers per node: a positive int, ``"cpu"`` (CPU cores), ``"gpu"`` (GPUs) or ``"auto"``
    (GPUs, else CPU cores), as torchrun."""
    spelled = nproc_spelling(value)
    if isinstance(spelled, int):
        return spelled
    if spelled == "gpu" and not torch.cuda.is_available():
        raise ValueError("nproc_per_node='gpu' but this machine has no usable CUDA GPU; use an int or 'cpu'.")
    if torch.cuda.is_available():  # auto or gpu
        return torch.cuda.device_count()
    return os.cpu_count() or 1  # auto or cpu


def config_from_args(ns: argparse.Namespace) -> LaunchConfig:
    """The config a parsed launcher command line (``args.parse_launch_args``) asks for."""
    compat.refuse_unsupported(ns)
    addr, port = ns.master_addr, ns.master_port
    if ns.rdzv_endpoint and not ns.standalone:  # torchrun: the endpoint is where nodes meet
        addr, port = compat.split_endpoint(ns.rdzv_endpoint)
    if ns.standalone:
        if str(ns.nnodes) not in ("1", "1:1"):
            raise ValueError(f"--standalone is a one-node job, but --nnodes={ns.nnodes}; drop one of them.")
        addr, port = "127.0.0.1", None
    nproc = parse_nproc(ns.nproc_per_node)
    return LaunchConfig(
        nproc_per_node=nproc,
        nnodes="1" if ns.nnodes == "1:1" else ns.nnodes,
        node_rank=ns.node_rank,
        master_addr=addr,
        master_port=port,
        backend=ns.backend,
        max_restarts=ns.max_restarts,
        monitor_interval=ns.monitor_interval,
        start_timeout=ns.start_timeout,
        log_dir=ns.log_dir,
        timeout=ns.timeout,
        run_id=ns.run_id,
        job_token=ns.job_token,
        job_token_file=ns.job_token_file,
        rank0_only=ns.rank0_only,
        shutdown_timeout=ns.shutdown_timeout,
        warm_spares=ns.warm_spares,
        rdzv_backend=None if ns.standalone else ns.rdzv_backend,
        rdzv_conf=compat.rdzv_conf(ns.rdzv_conf),
        local_addr=ns.local_addr,
        role=ns.role,
        run_as="module" if ns.module else "executable" if ns.no_python else "script",
        console_local_ranks=compat.console_local_ranks(ns.local_ranks_filter, nproc),
        redirects=ns.redirects,
        tee=ns.tee,
        output_prefix=ns.output_prefix,
        signals_to_handle=ns.signals_to_handle,
        event_log_handler=ns.event_log_handler,
        virtual_local_rank=ns.virtual_local_rank,
        cpu_bind=ns.cpu_bind,
        loader_workers=ns.loader_workers,
        verbose=ns.verbose,
    )
