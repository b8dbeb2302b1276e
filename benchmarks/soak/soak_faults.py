"""Faults the soak injects from outside a running job, and the /proc checks after a round.

Used by benchmarks/soak/soak.py (not run by itself). The job is looked at as the kernel sees it:
worker pids come from the launcher's process tree in /proc (cmdline names
``neural_arch/distributed/launcher/worker.py``, the rank is the ``RANK`` its environment was
started with); a round's leftover processes are any whose command line or environment
names the round's directory (its run dir and its TMPDIR are both under it), wherever
they were re-parented to.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from benchmarks.common.proc_tree import PROC, alive, process_tree
from neural_arch.distributed.launcher.scratch import leftovers

WORKER_MARK = b"neural_arch/distributed/launcher/worker.py"


@dataclass
class Injected:
    """What the driver did to the job: when, to which process, and any note."""

    t: Optional[float] = None
    """time.time() of the (first) fault; None if it never fired."""
    rank: Optional[int] = None
    pids: list[int] = field(default_factory=list)
    """The process(es) signalled, in order."""
    note: str = ""


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def workers(launcher: int) -> dict[int, int]:
    """pid -> rank of the worker processes under ``launcher`` now."""
    found = {}
    for pid in process_tree(launcher):
        try:
            cmdline = (PROC / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        rank = _environ(pid).get("RANK")
        if WORKER_MARK in cmdline and rank is not None and alive({pid}):
            found[pid] = int(rank)
    return found


def signal_rank(
    launcher: int, rank: int, sig: int, exclude: frozenset[int] = frozenset(), wait: float = 0.0
) -> Optional[int]:
    """Send ``sig`` to the worker of ``rank`` (not one of ``exclude``), waiting up to ``wait``
    seconds for it to appear; its pid, or None if there was none. Signal 0 only finds it."""
    deadline = time.monotonic() + wait
    while True:
        pid = next((p for p, r in workers(launcher).items() if r == rank and p not in exclude), None)
        if pid is not None:
            try:
                os.kill(pid, sig)
                return pid
            except ProcessLookupError:
                pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def inject(kind: str, proc: subprocess.Popen, rng: random.Random) -> Injected:
    """Do ``kind`` to the running job ``proc`` (its launcher) now."""
    done = Injected(rank=rng.randrange(2))
    sig = signal.SIGSTOP if kind == "sigstop" else signal.SIGKILL
    if kind == "kill_launcher":
        done.t, done.rank = time.time(), None
        proc.kill()
        done.pids.append(proc.pid)
        return done
    before = frozenset(workers(proc.pid))
    pid = signal_rank(proc.pid, done.rank, sig)
    done.t = time.time()
    if pid is None:
        done.t, done.note = None, "missed: no such worker running (the run had ended?)"
        return done
    done.pids.append(pid)
    if kind == "kill_restart":  # then one of the NEW workers, at a random moment of its start
        second = rng.randrange(2)
        found = signal_rank(proc.pid, second, 0, exclude=before, wait=120)
        if found is None:
            done.note = "no new worker appeared"
            return done
        delay = rng.uniform(0.0, 3.0)
        time.sleep(delay)
        try:
            os.kill(found, signal.SIGKILL)
            done.pids.append(found)
            done.note = f"new rank {second} (pid {found}) killed {delay:.2f} s after it appeared"
        except ProcessLookupError:
            done.note = f"new rank {second} (pid {found}) gone before its kill at {delay:.2f} s"
    return done


def round_processes(round_dir: Path) -> dict[int, str]:
    """pid -> command line of every live process that names ``round_dir`` (not this one)."""
    mark, found = str(round_dir).encode(), {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if (mark in cmdline or mark in environ) and alive({int(entry.name)}):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
    return found


def wait_clean(round_dir: Path, tmp: Path, grace: float) -> tuple[dict[int, str], list[str], float]:
    """Wait up to ``grace`` s for the round's processes and temp files to go: (survivors,
    leftover names in ``tmp`` but torch's cache, seconds waited). Survivors are then
    SIGKILLed (ours to stop)."""
    start = time.monotonic()
    while True:
        left = round_processes(round_dir)
        files = [p.name for p in leftovers(tmp)]
        waited = time.monotonic() - start
        if (not left and not files) or waited > grace:
            break
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left, files, waited
