"""Turn torchrun's option values into ours, and refuse in one line what we cannot honour.

Use: ``config_from_args(parse_launch_args(argv))`` (``config.py``) calls these; each raises
``ValueError`` naming the option, its value and what works instead. ``logs_specs`` and
``output_plan`` turn --log-dir/--tee/--redirects into torch elastic's files and the workers'
stream plan (``launch.py``).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std

from neural_arch.distributed.launcher.output import OutputSpec

if TYPE_CHECKING:
    from neural_arch.distributed.launcher.config import LaunchConfig

DEFAULT_RDZV_PORT = 29400
"""torchrun's port for a c10d endpoint given without one."""
DEFAULT_MASTER_PORT = 29500
"""torchrun's --master-port, where the nodes of a static rendezvous meet when none is given."""


def refuse_unsupported(ns: argparse.Namespace) -> None:
    """One-line ``ValueError`` for torchrun options accepted by the parser but not honoured."""
    if ns.rdzv_backend in ("etcd", "etcd-v2"):
        raise ValueError(
            f"--rdzv-backend={ns.rdzv_backend} is not supported by this launcher (it needs an etcd "
            "server and python-etcd); use --rdzv-backend=c10d with --rdzv-endpoint=HOST:PORT."
        )
    instead = {
        "duplicate_stdout_filters": "grep the ranks' --log-dir/rank_N.log files instead",
        "duplicate_stderr_filters": "grep the ranks' --log-dir/rank_N.log files instead",
        "logs_specs": "this launcher writes torchrun's --log-dir layout itself, and LOG_DIR/rank_N.log",
        "numa_binding": "bind with numactl in front of the launcher instead",
    }
    for name, hint in instead.items():
        if getattr(ns, name):
            raise ValueError(
                f"--{name.replace('_', '-')}={getattr(ns, name)!r} is not supported by this launcher; {hint}."
            )
    if ns.module and ns.no_python:
        raise ValueError("--module and --no-python exclude each other: a module needs python.")
    if ns.run_path:
        raise ValueError(
            "--run-path is not supported by this launcher: each worker runs the script as `python SCRIPT` "
            "would (torchrun's way without --run-path); drop --run-path."
        )


def split_endpoint(text: str) -> tuple[str, int]:
    """``"node1:29500"`` -> ("node1", 29500); ``"node1"`` -> ("node1", 29400), as torchrun."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = text.strip(), ""
    try:
        number = int(port) if port else DEFAULT_RDZV_PORT
    except ValueError:
        raise ValueError(f"--rdzv-endpoint={text!r} must be HOST or HOST:PORT, e.g. node1:29400.") from None
    if not host:
        raise ValueError(f"--rdzv-endpoint={text!r} names no host; e.g. --rdzv-endpoint=node1:29400.")
    return host.strip("[]"), number


def rdzv_conf(text: str) -> dict[str, str]:
    """``"join_timeout=900,last_call_timeout=5"`` -> a dict (values stay strings, as torchrun's)."""
    conf = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(
                f"--rdzv-conf={text!r}: {item!r} is not KEY=VALUE; e.g. join_timeout=900,last_call_timeout=5."
            )
        conf[key.strip()] = value.strip()
    return conf


def console_local_ranks(filter_text: str, nproc: int) -> Optional[tuple[int, ...]]:
    """Local ranks whose output the console shows, from --local-ranks-filter (None: all)."""
    if not filter_text.strip():
        return None
    try:
        shown = {int(part) for part in filter_text.split(",") if part.strip()}
    except ValueError:
        raise ValueError(
            f"--local-ranks-filter={filter_text!r} must be comma-separated local ranks, e.g. 0,1."
        ) from None
    return tuple(sorted(shown & set(range(nproc))))


def stream_masks(text: str, nproc: int, option: str) -> dict[int, int]:
    """torchrun's --redirects / --tee value (``3``, ``1``, ``0:3,1:2``) as each local rank's streams,
    a mask of 1 (stdout) and 2 (stderr); ranks not named: 0."""
    try:
        spec = Std.from_str(text)
    except ValueError:
        raise ValueError(
            f"--{option}={text!r} must be 0-3 (1 stdout, 2 stderr, 3 both), or LOCAL_RANK:N,... e.g. 0:3,1:2."
        ) from None
    per_rank = spec if isinstance(spec, dict) else dict.fromkeys(range(nproc), spec)
    return {rank: int(std.value) for rank, std in per_rank.items() if 0 <= rank < nproc}


def check_signals(names: str) -> tuple[str, ...]:
    """``"SIGTERM,SIGUSR1"`` -> the names, each checked to be a signal of this system."""
    found = tuple(part.strip() for part in names.split(",") if part.strip())
    for name in found:
        if not hasattr(signal.Signals, name) and name not in signal.Signals.__members__:
            raise ValueError(f"--signals-to-handle={names!r}: {name!r} is not a signal name (e.g. SIGTERM, SIGUSR1).")
    return found


def check_event_handler(name: str) -> None:
    """The torch elastic event handler must exist (torch would fail with a KeyError later)."""
    from torch.distributed.elastic.events.handlers import _log_handlers

    if name not in _log_handlers:
        raise ValueError(
            f"--event-log-handler={name!r} is not a torch elastic handler; use one of {sorted(_log_handlers)}."
        )


def logs_specs(config: LaunchConfig, scratch: Path) -> DefaultLogsSpecs:
    """torch elastic's files (error.json, the folders of stdout.log/stderr.log): torchrun's layout
    under --log-dir; without one, in the scratch directory, removed at the end, unless a stream
    goes to a file (--tee/--redirects): then, as torchrun, in a kept torchelastic_* temporary folder."""
    files = any(config.redirect_masks.values()) or any(config.tee_masks.values())
    if config.log_dir is None and not files:
        return DefaultLogsSpecs(log_dir=str(scratch / "elastic"))
    specs = DefaultLogsSpecs(log_dir=config.log_dir)
    if config.log_dir is None:
        print(
            f"launcher: note: --tee/--redirects without --log-dir: the ranks' stdout.log/stderr.log go "
            f"under {specs.root_log_dir}",
            file=sys.stderr,
            flush=True,
        )
    return specs


def output_plan(config: LaunchConfig, template: Optional[str]) -> str:
    """NEURAL_ARCH_OUTPUT: each local rank's streams (output.py); ``template``: torchrun's
    TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, for ``--output-prefix torchrun``."""
    c = config
    prefix = template if c.output_prefix == "torchrun" else None
    return OutputSpec.plan(c.nproc, c.redirect_masks, c.tee_masks, c.output_prefix, c.role, prefix).to_text()
