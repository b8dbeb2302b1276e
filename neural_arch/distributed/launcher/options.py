"""The launcher's command-line options: torchrun's (torch 2.13) in both spellings, plus ours.

Use: ``add_options(parser)``; ``args.build_parser()`` does it. What each torchrun option
does here, where it differs from torchrun, is said in its help text; options this launcher
accepts but cannot honour are refused in one line by ``torchrun_compat.refuse_unsupported``.
Every torchrun option also takes its default from ``PET_<OPTION>`` (``args.apply_pet_defaults``).
"""

from __future__ import annotations

import argparse

TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def add_options(p: argparse.ArgumentParser) -> None:
    """Add every option, in groups, to ``p``."""
    _job(p.add_argument_group("job size"))
    rendezvous = p.add_argument_group("rendezvous (where nodes meet)")
    _rendezvous(rendezvous)
    _job_token(rendezvous)
    _program(p.add_argument_group("what the workers run"))
    _restarts(p.add_argument_group("restarts and timeouts"))
    _output(p.add_argument_group("output"))
    _accepted(p.add_argument_group("accepted for torchrun compatibility"))


def _job(g: argparse._ArgumentGroup) -> None:
    add = g.add_argument
    add(
        "--nproc-per-node",
        "--nproc_per_node",
        default="1",
        help="workers on this node: an int, 'cpu' (CPU cores), 'gpu' (GPUs) or 'auto' (GPUs, else CPU cores)",
    )
    add("--nnodes", default="1", help="nodes: N, or MIN:MAX for an elastic job")
    add(
        "--node-rank",
        "--node_rank",
        type=int,
        default=0,
        help="this node's index (static rendezvous only; c10d assigns node ranks and warns that it ignores it)",
    )
    add(
        "--backend",
        default=None,
        choices=["gloo", "nccl", "auto"],
        help="collective backend for init_process_group() (None: nccl with GPUs, else gloo)",
    )


def _rendezvous(g: argparse._ArgumentGroup) -> None:
    add = g.add_argument
    add("--master-addr", "--master_addr", default="127.0.0.1", help="host of node 0")
    add(
        "--master-port",
        "--master_port",
        type=int,
        default=None,
        help="port on node 0 (None on one node: a free port chosen by the OS; on several nodes: 29500, torchrun's)",
    )
    add(
        "--rdzv-backend",
        "--rdzv_backend",
        default=None,
        metavar="{static,c10d}",  # torchrun's etcd/etcd-v2 are refused in one line (torchrun_compat.py)
        help="None: automatic (one node: static on a free port; N nodes: static; MIN:MAX: c10d). "
        "c10d: nodes meet at --rdzv-endpoint and get their node rank from the rendezvous",
    )
    add(
        "--rdzv-endpoint",
        "--rdzv_endpoint",
        default="",
        help="HOST[:PORT] where nodes meet; sets --master-addr/--master-port (port default 29400; 0, one node "
        "only: a free port)",
    )
    add(
        "--rdzv-id",
        "--rdzv_id",
        "--run-id",
        "--run_id",
        dest="run_id",
        default=None,
        help="job id shared by all nodes (None: derived from the endpoint)",
    )
    add(
        "--rdzv-conf",
        "--rdzv_conf",
        default="",
        help="more rendezvous settings, KEY=VALUE,... (e.g. join_timeout=900,last_call_timeout=5)",
    )
    add(
        "--standalone",
        action="store_true",
        help="one node, rendezvous on a free port (ignores --rdzv-*/--master-*); also the default for one node",
    )
    add("--local-addr", "--local_addr", default=None, help="this node's address for the rendezvous (None: its FQDN)")
    add("--start-timeout", "--start_timeout", type=float, default=600, help="seconds to wait for all nodes to join")


def _job_token(g: argparse._ArgumentGroup) -> None:
    add = g.add_argument
    add(
        "--job-token",
        "--job_token",
        default=None,
        help="multi-node: every node must prove this token to join (the host checks each one), so a node "
        "without it is refused; visible in /proc/PID/cmdline to every user: prefer --job-token-file or "
        "NEURAL_ARCH_JOB_TOKEN (None: those, else --rdzv-id, else the scheduler's job id such as SLURM_JOB_ID)",
    )
    add(
        "--job-token-file",
        "--job_token_file",
        default=None,
        help="read the job token from the first line of this file (keep it mode 0600)",
    )


def _program(g: argparse._ArgumentGroup) -> None:
    add = g.add_argument
    add("-m", "--module", action="store_true", help="SCRIPT is a module name, run as with 'python -m'")
    add("--no-python", "--no_python", action="store_true", help="SCRIPT is an executable, run without python")
    add("--role", default="default", help="name of the workers' role (ROLE_NAME in their environment)")
    add(
        "--virtual-local-rank",
        "--virtual_local_rank",
        action="store_true",
        help="LOCAL_RANK=0 in every worker, CUDA_VISIBLE_DEVICES set to its GPU",
    )
    add(
        "--cpu-bind",
        "--cpu_bind",
        choices=["auto", "none"],
        default="auto",
        help="auto (default): each worker its own cores when the workers' threads fill this node's CPUs; "
        "none: the OS places them, as torchrun",
    )
    add(
        "--loader-workers",
        "--loader_workers",
        type=int,
        default=None,
        help="DataLoader worker processes each rank starts, so that --cpu-bind auto binds a rank to at least "
        "that many CPUs (unset: unknown, so at least 2); 0: none, a rank may get one core",
    )


def _restarts(g: argparse._ArgumentGroup) -> None:
    add = g.add_argument
    add(
        "--max-restarts",
        "--max_restarts",
        type=int,
        default=3,
        help="group restarts after a failure before giving up (torchrun: 0, as --max-restarts 0); a rank failing "
        "with the same Python exception at the same place on two attempts in a row, with no checkpoint saved in "
        "between, stops at once",
    )
    add(
        "--monitor-interval", "--monitor_interval", type=float, default=0.1, help="seconds between worker health checks"
    )
    add(
        "--timeout",
        type=float,
        default=None,
        help="collective timeout in seconds for init_process_group() (None: 600); a hung rank fails after it",
    )
    add(
        "--shutdown-timeout",
        "--shutdown_timeout",
        type=int,
        default=5,
        help="seconds a stopping worker gets after SIGTERM before SIGKILL (torchrun: 30)",
    )
    add(
        "--warm-spares",
        "--warm_spares",
        action="store_true",
        help="keep one spare worker per local rank with torch imported: a restart starts from them instead of "
        "new interpreters (seconds less per restart; about 300 MB of memory per spare)",
    )
    add(
        "--signals-to-handle",
        "--signals_to_handle",
        default=TORCHRUN_SIGNALS,
        help="signals the launcher forwards to the workers, comma-separated (add SIGUSR1 for SLURM's --signal)",
    )


def _output(g: argparse._ArgumentGroup) -> None:
    add = g.add_argument
    add(
        "--log-dir",
        "--log_dir",
        default=None,
        help="torchrun's layout, LOG_DIR/<run_id>_<random>/attempt_<k>/<local_rank>/error.json (stdout.log, "
        "stderr.log with --tee/--redirects), plus each rank's whole output, every attempt, in LOG_DIR/rank_N.log",
    )
    add("--rank0-only", "--rank0_only", action="store_true", help="show only global rank 0's output on the console")
    add(
        "--local-ranks-filter",
        "--local_ranks_filter",
        default="",
        help="show only these local ranks' output on the console, e.g. 0,1 ('': all)",
    )
    add(
        "-r",
        "--redirects",
        default="0",
        help="streams that go to their stdout.log/stderr.log only, off the console: 1 stdout, 2 stderr, 3 both, "
        "or per local rank 0:3,1:2",
    )
    add(
        "-t",
        "--tee",
        default="0",
        help="streams that go to their stdout.log/stderr.log and the console (values as --redirects)",
    )
    add(
        "--output-prefix",
        "--output_prefix",
        choices=["rank", "torchrun"],
        default="rank",
        help="rank: every console line of a worker starts '[rank N] '; torchrun: as torchrun, none but on a "
        "--tee'd stream's lines, '[<role><local rank>]:' (or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)",
    )
    add(
        "--verbose",
        action="store_true",
        help="also show torch elastic's own log lines (W/E lines naming api.py, at its level: WARNING, or LOGLEVEL)",
    )


def _accepted(g: argparse._ArgumentGroup) -> None:
    add = g.add_argument
    add(
        "--start-method",
        "--start_method",
        default="spawn",
        choices=["spawn", "fork", "forkserver"],
        help="no effect, as under torchrun, which uses it only to run a script in-process (its run-path mode, "
        "refused here): a script runs in a fresh process",
    )
    add(
        "--event-log-handler",
        "--event_log_handler",
        default="null",
        help="torch elastic event handler name ('null', 'console', ...)",
    )
    # torchrun's options that do not work here: parsed only to be refused in one line saying what to do
    # instead (torchrun_compat.refuse_unsupported), never listed in --help.
    for names in (
        ("--duplicate-stdout-filters", "--duplicate_stdout_filters"),
        ("--duplicate-stderr-filters", "--duplicate_stderr_filters"),
    ):
        add(*names, default="", help=argparse.SUPPRESS)
    add("--logs-specs", "--logs_specs", default=None, help=argparse.SUPPRESS)
    add("--run-path", "--run_path", action="store_true", help=argparse.SUPPRESS)
    add("--numa-binding", "--numa_binding", default=None, help=argparse.SUPPRESS)
