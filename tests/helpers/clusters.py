"""Bring up a real single-node SLURM (slurmctld + slurmd + munge) for the tests, and tear it down.

Use: ``with local_slurm() as conf: subprocess.run(["srun", "-n", "2", ...], env=conf.env)``.
Needs Debian's ``slurm-wlm`` and ``munge`` and root (``.ci/run`` installs them); callers
skip with the returned reason when they are missing. Facts about this setup are in
``../shared/notes/local-cluster.md``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

STATE = Path("/tmp/neural_arch_slurm")


@dataclass
class SlurmCluster:
    """A running local SLURM: pass ``env`` to srun/sbatch so they find its slurm.conf."""

    conf: Path
    env: dict[str, str] = field(default_factory=dict)


def slurm_missing_reason() -> Optional[str]:
    """Why a local SLURM cannot be started here, or None if it can."""
    for tool in ("slurmctld", "slurmd", "srun", "sbatch", "munged", "munge", "unmunge"):
        if shutil.which(tool) is None:
            return f"{tool} not found: install Debian's slurm-wlm and munge (.ci/run does)"
    if os.geteuid() != 0:
        return "starting slurmctld/slurmd/munged needs root"
    return None


def _stop_previous() -> None:
    for pidfile in STATE.glob("*.pid"):
        try:
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError, PermissionError):
            pass
        pidfile.unlink(missing_ok=True)
    time.sleep(0.5)


def _start_munge() -> None:
    key = Path("/etc/munge/munge.key")
    munge = pwd.getpwnam("munge")
    if not key.exists() or key.stat().st_size < 32:
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(os.urandom(1024))
    os.chown(key, munge.pw_uid, munge.pw_gid)
    key.chmod(0o400)
    for d in ("/run/munge", "/var/lib/munge", "/var/log/munge"):
        Path(d).mkdir(parents=True, exist_ok=True)
        os.chown(d, munge.pw_uid, munge.pw_gid)
    ok = subprocess.run("munge -n | unmunge", shell=True, capture_output=True, text=True)
    if ok.returncode != 0:
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "munged --force"], check=True, timeout=30)
        for _ in range(50):
            if subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("munged did not start: `munge -n | unmunge` keeps failing")


def _write_conf(host: str) -> Path:
    spool = STATE / "spool"
    for d in (spool / "ctld", spool / "d", STATE / "log"):
        d.mkdir(parents=True, exist_ok=True)
    conf = STATE / "slurm.conf"
    cpus = os.cpu_count() or 2
    conf.write_text(
        "\n".join(
            [
                "ClusterName=neuralarch",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "AuthType=auth/munge",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                f"StateSaveLocation={spool / 'ctld'}",
                f"SlurmdSpoolDir={spool / 'd'}",
                f"SlurmctldPidFile={STATE / 'slurmctld.pid'}",
                f"SlurmdPidFile={STATE / 'slurmd.pid'}",
                f"SlurmctldLogFile={STATE / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={STATE / 'log' / 'slurmd.log'}",
                "ReturnToService=2",
                "MpiDefault=none",
                "SchedulerType=sched/backfill",
                # Test jobs come and go in seconds: look at pending ones every 2 s, not every 60 / 30.
                "SchedulerParameters=sched_interval=2,bf_interval=2",
                f"NodeName={host} CPUs={cpus} RealMemory=2000 State=UNKNOWN",
                f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
                "",
            ]
        )
    )
    return conf


@contextlib.contextmanager
def local_slurm(timeout: float = 30.0) -> Iterator[SlurmCluster]:
    """Start munge, slurmctld and slurmd on this host; stop the daemons on exit."""
    STATE.mkdir(parents=True, exist_ok=True)
    _stop_previous()
    _start_munge()
    host = socket.gethostname().split(".")[0]
    conf = _write_conf(host)
    env = dict(os.environ, SLURM_CONF=str(conf))
    try:
        subprocess.run(["slurmctld"], env=env, check=True, timeout=30)
        subprocess.run(["slurmd"], env=env, check=True, timeout=30)
        deadline = time.monotonic() + timeout
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip()
            if state in ("idle", "mixed", "allocated"):
                break
            if time.monotonic() > deadline:
                logs = (
                    (STATE / "log" / "slurmctld.log").read_text()[-2000:]
                    if (STATE / "log" / "slurmctld.log").exists()
                    else ""
                )
                raise RuntimeError(f"SLURM node not idle after {timeout:.0f} s (state {state!r}):\n{logs}")
            time.sleep(0.3)
        yield SlurmCluster(conf=conf, env=env)
    finally:
        _stop_previous()
