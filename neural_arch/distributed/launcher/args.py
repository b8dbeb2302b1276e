"""Parse launcher command lines in both orders: torchrun's and the seeds'.

``python -m neural_arch.distributed.launcher --nproc_per_node=2 train.py --lr 0.1``  (torchrun)
``python -m neural_arch.distributed.launcher train.py --nproc_per_node=2 --lr 0.1``  (seeds)

Rules: everything after a bare ``--`` goes to the script. If any launcher option comes
before the script, the torchrun order applies and everything after the script is the
script's. Otherwise (seeds' order) launcher options after the script are the launcher's
and all other arguments are the script's. Option names accept ``_`` or ``-``.
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

# option -> takes a value?
_OPTIONS = {
    "nproc_per_node": True, "nnodes": True, "node_rank": True, "master_addr": True,
    "master_port": True, "backend": True, "max_restarts": True, "monitor_interval": True,
    "start_timeout": True, "log_dir": True, "timeout": True, "run_id": True,
    "rank0_only": False, "standalone": False,
}


class LaunchUsageError(ValueError):
    """A command-line mistake: the CLI prints it as one line and exits 2."""


def build_parser() -> argparse.ArgumentParser:
    """The launcher's options (shared with ``neural-arch launch``)."""
    p = argparse.ArgumentParser(
        prog="python -m neural_arch.distributed.launcher",
        description="Start N worker processes per node running SCRIPT, with restarts on failure.",
        allow_abbrev=False,
    )
    add = p.add_argument
    add("--nproc_per_node", "--nproc-per-node", default="1", help="workers on this node: an int or 'auto' (GPUs, else CPUs)")
    add("--nnodes", default="1", help="nodes: N, or MIN:MAX for an elastic job")
    add("--node_rank", "--node-rank", type=int, default=0, help="this node's index (static multi-node jobs)")
    add("--master_addr", "--master-addr", default="127.0.0.1", help="host of node 0")
    add("--master_port", "--master-port", type=int, default=None, help="port on node 0 (default: a free one, single node)")
    add("--backend", default=None, choices=["gloo", "nccl", "auto"], help="collective backend for init_process_group()")
    add("--max_restarts", "--max-restarts", type=int, default=3, help="group restarts after a failure before giving up")
    add("--monitor_interval", "--monitor-interval", type=float, default=0.1, help="seconds between worker health checks")
    add("--start_timeout", "--start-timeout", type=float, default=600, help="seconds to wait for all nodes to join")
    add("--log_dir", "--log-dir", default=None, help="write each rank's whole output to LOG_DIR/rank_N.log")
    add("--timeout", type=float, default=None, help="collective timeout in seconds (a hung rank fails after this)")
    add("--run_id", "--run-id", default=None, help="job id shared by all nodes (elastic jobs)")
    add("--rank0_only", "--rank0-only", action="store_true", help="show only rank 0's output on the console")
    add("--standalone", action="store_true", help="accepted for torchrun compatibility (single node is the default)")
    add("script", help="the Python script to run on every worker")
    add("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def _option_name(token: str) -> Optional[str]:
    if not token.startswith("--"):
        return None
    name = token[2:].split("=", 1)[0].replace("-", "_")
    return name if name in _OPTIONS else None


def _take_option(tokens: list[str], i: int, name: str, ours: list[str]) -> int:
    """Move launcher option ``tokens[i]`` (and its value, if separate) to ``ours``; next index."""
    ours.append(tokens[i])
    if _OPTIONS[name] and "=" not in tokens[i]:
        if i + 1 >= len(tokens):
            raise LaunchUsageError(f"launcher option {tokens[i]} needs a value")
        ours.append(tokens[i + 1])
        return i + 2
    return i + 1


def split_argv(argv: Sequence[str]) -> tuple[list[str], str, list[str]]:
    """(launcher options, script, script args) from a command line in either order."""
    argv = list(argv)
    tail: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    ours: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name = _option_name(argv[i])
        if name is None:
            if argv[i] in ("-h", "--help"):
                return [argv[i]], "", []
            raise LaunchUsageError(f"unknown launcher option {argv[i]!r}; see --help (script options go after the script or after --)")
        i = _take_option(argv, i, name, ours)
    if i >= len(argv):
        if tail:  # `launcher [opts] -- script args`
            return ours, tail[0], tail[1:]
        raise LaunchUsageError("no script given: python -m neural_arch.distributed.launcher [options] SCRIPT [args]")
    script, rest = argv[i], argv[i + 1 :]
    if ours:  # torchrun order: the rest belongs to the script
        return ours, script, rest + tail
    script_args: list[str] = []
    j = 0
    while j < len(rest):  # seeds' order: pick our options out of the rest
        name = _option_name(rest[j])
        if name is None:
            script_args.append(rest[j])
            j += 1
        else:
            j = _take_option(rest, j, name, ours)
    return ours, script, script_args + tail


def parse_launch_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse a launcher command line (either order) into an argparse namespace."""
    ours, script, script_args = split_argv(argv)
    parser = build_parser()
    if ours[:1] in (["-h"], ["--help"]):
        parser.print_help()
        raise SystemExit(0)
    ns = parser.parse_args(ours + [script])
    ns.script_args = script_args
    return ns
