"""Run one training command for peers.py and record what it did: step stamps, loss, peak RSS per rank.

Not run on its own: ``record = run_command(cmd, out_dir, trainer_dir=None)``.

Peak RSS is read the same way for every framework: while the command runs, every process
under it is polled (every 0.3 s) for ``VmHWM`` in /proc/PID/status, the kernel's high-water
mark of its resident memory, so a peak between polls still counts. A rank is the process
whose pid a peer script reported, or, for ``neural-arch train`` (which reports none), the
process started with ``RANK=N`` in its environment.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import psutil  # comes with the bench extra (accelerate needs it)

POLL_S = 0.3


@dataclass
class Record:
    """One command's run: wall-clock start, rank 0's per-step stamps, final loss, peak RSS per rank."""

    started: float
    stamps: list[float]
    loss: float
    rss_mib: list[float]
    wall_s: float
    phases: dict[str, float]
    """Rank 0's wall-clock start-up marks: launched/joined (peers), set_up (the trainer's 'start:' log line)."""


def _hwm_mib(pid: int) -> Optional[float]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:  # the process has just gone
        return None
    return None


def _env_rank(pid: int) -> Optional[int]:
    try:
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"RANK="):
                return int(item[5:])
    except (OSError, ValueError):
        return None
    return None


def _watch(proc: subprocess.Popen, timeout: float) -> tuple[dict[int, float], dict[int, int]]:
    """Until ``proc`` exits: the peak RSS (MiB) of every process under it, and their RANK variables."""
    peaks: dict[int, float] = {}
    ranks: dict[int, int] = {}
    root = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"timed out after {timeout:.0f} s: {' '.join(proc.args)}")
        try:
            pids = [proc.pid] + [c.pid for c in root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pids = []
        for pid in pids:
            hwm = _hwm_mib(pid)
            if hwm is not None:
                peaks[pid] = max(hwm, peaks.get(pid, 0.0))
            if pid not in ranks:
                rank = _env_rank(pid)
                ranks[pid] = -1 if rank is None else rank
        time.sleep(POLL_S)
    return peaks, ranks


def run_command(
    cmd: list[str], out: Path, env: dict[str, str], trainer_dir: Optional[Path] = None, timeout: float = 900
) -> Record:
    """Run ``cmd``; read the peers' rank_N.json from ``out``, or the trainer's logs from ``trainer_dir``."""
    started = time.time()
    with open(out / "console.txt", "w") as console:
        proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, env=env)
        peaks, env_ranks = _watch(proc, timeout)
    wall = time.time() - started
    if proc.returncode != 0:
        tail = (out / "console.txt").read_text()[-3000:]
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{tail}")
    if trainer_dir is not None:
        stamps, loss, phases = _trainer_stamps(trainer_dir)
        # Helper processes a worker starts inherit its RANK: the rank is the largest of them.
        pids = {}
        for pid, rank in sorted(env_ranks.items(), key=lambda item: peaks.get(item[0], 0.0)):
            if rank >= 0:
                pids[rank] = pid
    else:
        records = [json.loads(p.read_text()) for p in sorted(out.glob("rank_*.json"))]
        stamps, loss = records[0]["stamps"], records[0]["loss"]
        phases = {k: records[0][k] for k in ("launched", "joined") if k in records[0]}
        if any(r["loss"] != loss for r in records):
            raise RuntimeError(f"ranks disagree on the loss: {[r['loss'] for r in records]}")
        pids = {r["rank"]: r["pid"] for r in records}
    rss = [peaks.get(pids.get(rank, -1), float("nan")) for rank in range(2)]
    return Record(started, stamps, loss, rss, wall, phases)


def _trainer_stamps(run_dir: Path) -> tuple[list[float], float, dict[str, float]]:
    """Rank 0's log time of every step's metrics row (logging.every_steps=1), the last row's
    loss, and the time of its 'start:' line (set-up done, before the first step)."""
    stamps, phases = [], {}
    for line in (run_dir / "logs" / "rank_0.log").read_text().splitlines():
        when = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # asctime, local time
        if " step " in line and "train/loss=" in line:
            stamps.append(when)
        elif "] start: " in line:
            phases["set_up"] = when
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return stamps, float([r for r in rows if "train/loss" in r][-1]["train/loss"]), phases


def clean_env() -> dict[str, str]:
    """The environment every command gets: 1 thread per process, gloo on loopback, no inherited rank."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
    return env
