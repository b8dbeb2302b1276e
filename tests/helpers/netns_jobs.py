"""A launcher per namespace host, and what the multi-host tests read of the job they run.

Use (tests/distributed/launcher/test_netns_lost_host.py, test_netns_memory_ring.py)::

    proc = start_node(host, master, port, tmp_path, "", ["--nnodes=1:2", "--rdzv_id=x"], train_args)
    wait_until(lambda: last_step(run) >= 6, "step 6", 240, procs)   # fails with every node's log
    starts(run)                     # ["world 1, step 0", "world 2, step 6", ...]: rank 0's start lines

Each launcher runs ``tests/scripts/train_paced.py`` (held after the steps whose gate files exist
in ``root/gate``) on one worker of ``host``, with the c10d rendezvous that ``master`` hosts, its
output in ``root/<host name><attempt>.log``, and the run in ``root/run``.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

import pytest

from tests.helpers.cli import LAUNCHER
from tests.helpers.netns import Host
from tests.helpers.paths import SCRIPTS

PACED = str(SCRIPTS / "train_paced.py")


def start_node(
    host: Host, master: Host, port: int, root: Path, attempt: str, flags: Sequence[str], args: Sequence[str]
) -> subprocess.Popen:
    """``host``'s launcher (``flags``: --nnodes, --rdzv_id, ...) of the job ``master`` hosts."""
    cmd = [
        *LAUNCHER,
        *flags,
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={master.addr}:{port}",
        f"--rdzv_conf=is_host={int(host is master)}",
        f"--local_addr={host.addr}",
        "--max_restarts=3",
        PACED,
        str(root / "gate"),
        *args,
        "--set",
        f"run.dir={root / 'run'}",
    ]
    log = root / f"{host.hostname}{attempt}.log"
    with open(log, "w") as out:
        proc = host.popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
    proc.log_path = log  # type: ignore[attr-defined]
    return proc


def log_of(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text()  # type: ignore[attr-defined]


def output(procs: list[subprocess.Popen]) -> str:
    """Every launcher's log, named (for a failure message)."""
    return "\n".join(f"--- {p.log_path.name}:\n{log_of(p)}" for p in procs)  # type: ignore[attr-defined]


def starts(run: Path) -> list[str]:
    """Rank 0's ``world W, step S`` start lines, one per attempt."""
    log = run / "logs" / "rank_0.log"
    return re.findall(r"start: (world \d+, step \d+)", log.read_text() if log.exists() else "")


def last_step(run: Path) -> int:
    rows = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    return max((int(m.group(1)) for m in (re.search(r'"step": (\d+)', r) for r in rows) if m), default=0)


def wait_until(check: Callable[[], bool], what: str, timeout: float, procs: list[subprocess.Popen]) -> None:
    """Poll ``check()``; fails with every launcher's output on timeout or when the first launcher ended."""
    deadline = time.monotonic() + timeout
    while not check():
        if procs[0].poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f} s (A: {procs[0].poll()})\n{output(procs)}")
        time.sleep(0.1)


def finished(procs: Sequence[subprocess.Popen], timeout: float) -> list:
    """Each launcher's exit status (None: still running after ``timeout`` seconds)."""
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes
