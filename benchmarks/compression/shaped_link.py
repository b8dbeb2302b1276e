"""Run a benchmark with its ranks' 127.0.0.1 traffic limited to a network link's rate.

Use: in a benchmark's ``main()``, ``add_link_option(parser)`` and, after parsing and before
spawning ranks, ``rerun_on_shaped_link(args)`` (``--link-gbit 0``, the default, leaves the
machine's loopback as it is). Linux only; needs root, or
unprivileged user namespaces for ``unshare --map-root-user``.

Why: on one machine two ranks exchange gradients through loopback, where the cost is the CPU's
copying, not a wire; several hosts are limited by their links. This re-runs the same command in
a private network namespace (nothing else on the machine is affected) whose loopback device has a
token-bucket filter (``tc qdisc ... tbf``) at twice the given rate: both ranks' traffic crosses
that one device, while two hosts each send on their own full-duplex link, so a ring all-reduce
between 2 hosts on G Gb/s links moves the same bytes per link in the same time as this loopback
at 2G. The CPU cost of loopback TCP remains on top (measured: a 34 MB fp32 all-reduce took
19 ms unshaped, 31.5 ms at --link-gbit 10, 52.6 ms at --link-gbit 5; pure wire time 27 and 54 ms).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from argparse import SUPPRESS, ArgumentParser, Namespace

MARK = "--on-shaped-link"
"""Added to the re-run command line so the re-run does not re-run itself."""


def add_link_option(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--link-gbit",
        type=float,
        default=0.0,
        help="limit the ranks' traffic as if each host had its own link of this many Gb/s "
        "(a shaped loopback in a private network namespace; root or user namespaces); 0: unshaped",
    )
    parser.add_argument(MARK, action="store_true", help=SUPPRESS)


def rerun_on_shaped_link(args: Namespace) -> None:
    """Re-run this process's command in a namespace with loopback shaped for ``args.link_gbit`` Gb/s
    per host, and exit with its status; return at once when it is 0 or this already is the re-run."""
    gbit = args.link_gbit
    if not gbit or args.on_shaped_link:
        return
    if gbit < 0:
        sys.exit(f"--link-gbit {gbit}: must be > 0 (Gb/s per host), or 0 for the machine's loopback")
    missing = [tool for tool in ("unshare", "tc", "ip") if shutil.which(tool) is None]
    if missing:
        sys.exit(
            f"--link-gbit needs {', '.join(missing)} (util-linux, iproute2); install them or leave --link-gbit at 0"
        )
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    setup = (
        f"ip link set lo up && tc qdisc add dev lo root tbf rate {2 * gbit:g}gbit burst 4mb latency 50ms "
        '&& exec "$0" "$@"'
    )
    spec = getattr(sys.modules["__main__"], "__spec__", None)  # None when started as a file path
    program = ["-m", spec.name] if spec is not None else [sys.argv[0]]  # a module reruns as one: its imports hold
    command = [sys.executable, *program, *sys.argv[1:], MARK]
    status = subprocess.call(["unshare", "--net", *user, "sh", "-c", setup, *command])
    if status == 1 and os.geteuid() != 0:
        print("--link-gbit: could not shape a private loopback (needs root or user namespaces)", file=sys.stderr)
    sys.exit(status)


def describe(gbit: float) -> str:
    """How the link was set, for the printed report."""
    if not gbit:
        return "loopback unshaped"
    return f"loopback shaped as {gbit:g} Gb/s per host (tbf at {2 * gbit:g} Gb/s, private network namespace)"
