"""Turn torchrun's option values into ours, and refuse in one line what we cannot honour.

Use: ``config_from_args(parse_launch_args(argv))`` (``config.py``) calls these; each raises
``ValueError`` naming the option, its value and what works instead.
"""

from __future__ import annotations

import argparse
import signal
from typing import Optional

from torch.distributed.elastic.multiprocessing import Std

DEFAULT_RDZV_PORT = 29400
"""torchrun's port for a c10d endpoint given without one."""


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
        "logs_specs": "this launcher writes its own logs: --log-dir/rank_N.log",
        "numa_binding": "bind with numactl in front of the launcher instead",
    }
    for name, hint in instead.items():
        if getattr(ns, name):
            raise ValueError(
                f"--{name.replace('_', '-')}={getattr(ns, name)!r} is not supported by this launcher; {hint}."
            )
    if ns.module and ns.no_python:
        raise ValueError("--module and --no-python exclude each other: a module needs python.")


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


def console_local_ranks(filter_text: str, redirects: str, nproc: int) -> Optional[tuple[int, ...]]:
    """Local ranks whose output the console shows (None: all), from --local-ranks-filter and
    --redirects (a rank whose stdout and stderr both go to the log file only is hidden)."""
    shown = set(range(nproc))
    if filter_text.strip():
        try:
            shown &= {int(part) for part in filter_text.split(",") if part.strip()}
        except ValueError:
            raise ValueError(
                f"--local-ranks-filter={filter_text!r} must be comma-separated local ranks, e.g. 0,1."
            ) from None
    try:
        spec = Std.from_str(redirects)
    except ValueError:
        raise ValueError(f"--redirects={redirects!r} must be 0-3, or LOCAL_RANK:N,... e.g. 0:3,1:0.") from None
    per_rank = spec if isinstance(spec, dict) else {rank: spec for rank in range(nproc)}
    for rank, std in per_rank.items():
        if std in (Std.OUT, Std.ERR):
            raise ValueError(
                f"--redirects={redirects!r}: redirecting only stdout or only stderr is not supported "
                "(they are one ordered stream here); use 3 (both, log file only) or 0."
            )
        if std == Std.ALL:
            shown.discard(rank)
    return None if shown == set(range(nproc)) else tuple(sorted(shown))


def check_tee(tee: str) -> None:
    """--tee is accepted in torchrun's syntax (output always goes to console and log here)."""
    try:
        Std.from_str(tee)
    except ValueError:
        raise ValueError(f"--tee={tee!r} must be 0-3, or LOCAL_RANK:N,... e.g. 0:3.") from None


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
