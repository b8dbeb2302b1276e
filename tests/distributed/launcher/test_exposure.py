"""What a job exposes and how long its processes live: loopback-only listeners, no orphans,
no temp directory left, and a foreign job refused at the rendezvous.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_exposure.py -q``

The running-job tests look at the job from outside, as the kernel sees it: the launcher's
whole process tree from /proc, each process's socket inodes matched against
/proc/net/tcp{,6}. Each job gets its own TMPDIR, so "no temp directory left" means that
directory is empty, whatever other jobs on the machine do.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neural_arch.distributed.launcher.scratch import leftovers
from tests.helpers.cli import LAUNCHER
from tests.helpers.long_run import LONG, wait_for_rows
from tests.helpers.multiproc import free_port
from tests.helpers.paths import SCRIPTS
from tests.helpers.proc_tree import alive, is_loopback, listening, process_tree

pytestmark = pytest.mark.multiprocess  # every test here runs launchers and their workers

PROBE = str(SCRIPTS / "launch_probe.py")
GONE_WITHIN = 60.0
"""Seconds after the launcher's death or stop after which a process still running is a hang: a
guard, not a verdict on speed (a busy machine may take long to save and exit; the verdicts are
the exit statuses, the last line and the temp files)."""


def start(cmd: list[str], tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """Run ``cmd`` with its own TMPDIR; output to a file (a pipe nobody reads could block the
    workers' log pumps, which would then look like survivors). Returns (process, output file)."""
    tmp, out = tmp_path / "tmp", tmp_path / "out.txt"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    with open(out, "w") as sink:
        return subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env), out


def wait_for_text(out: Path, texts: list[str], proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all(text in out.read_text() for text in texts):
        assert proc.poll() is None, out.read_text()
        assert time.monotonic() < deadline, out.read_text()
        time.sleep(0.1)


def job_tree(proc: subprocess.Popen, workers: int) -> set[int]:
    """The launcher's process tree once its ``workers`` workers are all in it."""
    deadline = time.monotonic() + 30
    while True:
        tree = process_tree(proc.pid)
        found = [pid for pid in tree if b"launcher/worker.py" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        if len(found) >= workers or time.monotonic() > deadline:
            return tree
        time.sleep(0.1)


def assert_loopback_only(tree: set[int], launcher: int) -> None:
    sockets = listening(tree)
    exposed = [s for s in sockets if not is_loopback(s[1])]
    assert not exposed, f"listening beyond loopback: {exposed} (all: {sockets})"
    # One node: the rendezvous store and the attempt's store in the launcher (a c10d rendezvous
    # would add torch's agent store); each worker's gloo listener.
    assert sum(pid == launcher for pid, _, _ in sockets) >= 2, sockets
    assert len({pid for pid, _, _ in sockets} - {launcher}) >= 2, sockets


def wait_gone(pids: set[int], timeout: float) -> float:
    """Seconds until none of ``pids`` runs; fails after ``timeout``."""
    start = time.monotonic()
    while alive(pids):
        assert time.monotonic() - start < timeout, f"still alive after {timeout} s: {sorted(alive(pids))}"
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["sigkill", "sigint"])
def test_launcher_job_listens_on_loopback_only_and_nothing_outlives_the_launcher(tmp_path, signum):
    # hang1: both ranks have joined the group (stores and gloo sockets exist), then rank 1 sleeps
    # and rank 0 waits in a collective: a job that runs until something stops it.
    proc, out = start(LAUNCHER + ["--nproc_per_node=2", "--max_restarts=0", PROBE, str(tmp_path), "hang1"], tmp_path)
    try:
        wait_for_text(out, ["hello from rank 0 of 2", "hello from rank 1 of 2"], proc)
        tree = job_tree(proc, 2)
        assert_loopback_only(tree, proc.pid)
        assert any((tmp_path / "tmp").iterdir()), "the launcher made no temp directory: test set-up changed"
        proc.send_signal(signum)  # SIGKILL: the launcher runs no cleanup of its own
        took = wait_gone(tree, GONE_WITHIN)
        assert proc.wait() == (-signum if signum == signal.SIGKILL else 128 + signum), out.read_text()
        assert not list((tmp_path / "tmp").iterdir()), list((tmp_path / "tmp").rglob("*"))
        if signum == signal.SIGINT:  # a stop asked for: one line, no traceback from the launcher
            assert (
                out.read_text()
                .strip()
                .splitlines()[-1]
                .endswith("stopped by SIGINT; the workers were stopped too (SIGKILL after --shutdown-timeout).")
            ), out.read_text()
        print(f"every process of the job gone {took:.2f} s after the launcher's {signum.name}")
    finally:
        for pid in alive(process_tree(proc.pid)) if proc.poll() is None else ():
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_train_job_listens_on_loopback_only_and_stops_on_sigterm(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "neural_arch.cli", "train", *LONG, "--set", f"run.dir={run}", "--nproc-per-node", "2"]
    proc, out = start(cmd, tmp_path)
    try:
        wait_for_rows(run, 2, proc)
        tree = job_tree(proc, 2)
        assert_loopback_only(tree, proc.pid)
        proc.send_signal(signal.SIGTERM)
        took = wait_gone(tree, GONE_WITHIN)  # the launcher too: it exits once its workers saved and left
        assert proc.wait(timeout=5) == 128 + signal.SIGTERM, out.read_text()
        assert not leftovers(tmp_path / "tmp"), list((tmp_path / "tmp").rglob("*"))
        print(f"every process of the job gone {took:.2f} s after SIGTERM to the launcher")
    finally:
        if proc.poll() is None:
            proc.kill()


STUBBORN = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('stubborn', flush=True)\n"
STUBBORN += "time.sleep(120)\n"


@pytest.mark.timeout(120)
def test_a_worker_that_ignores_sigterm_is_sigkilled_after_the_shutdown_timeout(tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    cmd = LAUNCHER + ["--nproc_per_node=1", "--max_restarts=0", "--shutdown-timeout=2", str(script)]
    proc, out = start(cmd, tmp_path)
    try:
        wait_for_text(out, ["stubborn"], proc)
        tree = job_tree(proc, 1)
        proc.send_signal(signal.SIGTERM)
        took = wait_gone(tree, GONE_WITHIN)
        assert proc.wait(timeout=5) == 128 + signal.SIGTERM, out.read_text()
        assert took >= 2, f"gone {took:.2f} s after SIGTERM: before the shutdown timeout"
        print(f"the worker that ignored SIGTERM was gone {took:.2f} s after it (--shutdown-timeout=2)")
    finally:
        for pid in alive(process_tree(proc.pid)) if proc.poll() is None else ():
            os.kill(pid, signal.SIGKILL)


def lan_address() -> str:
    """This machine's address on its default route (no packet is sent), else 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def node(addr: str, port: int, rank: int, token: str, out: Path, *extra: str) -> subprocess.Popen:
    cmd = LAUNCHER + [
        "--nproc_per_node=1",
        "--nnodes=2",
        f"--node_rank={rank}",
        f"--master_addr={addr}",
        f"--master_port={port}",
        f"--job_token={token}",
        "--start_timeout=60",
        *extra,
        PROBE,
        str(out),
        "ok",
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1"),
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("rdzv", [[], ["--rdzv_backend=c10d"]], ids=["static", "c10d"])
def test_a_foreign_job_on_the_rendezvous_port_is_refused_and_the_same_token_joins(tmp_path, rdzv):
    # Static: node 0 hosts at the machine's LAN address, as a real multi-node job would (c10d
    # decides who hosts by matching the host name, which resolves to 127.0.0.1 here).
    addr, port = ("127.0.0.1" if rdzv else lan_address()), free_port()
    first = node(addr, port, 0, "job-a", tmp_path, *rdzv)
    try:
        deadline = time.monotonic() + 60  # until node 0 hosts the rendezvous store (and has claimed it)
        while not any(p == port for _, _, p in listening(process_tree(first.pid))):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.1)
        sockets = listening(process_tree(first.pid))
        assert (first.pid, addr, port) in sockets and not [s for s in sockets if s[1] in ("0.0.0.0", "::")], sockets
        foreign = node(addr, port, 1, "job-b", tmp_path, *rdzv)
        _, err = foreign.communicate(timeout=60)
        assert foreign.returncode == 2, err
        # c10d: node 1's --node_rank gets torchrun's own warning that c10d ignores it (as torchrun prints it)
        lines = [line for line in err.strip().splitlines() if "node_rank is only used for static" not in line]
        assert (
            len(lines) == 1
            and f"refusing to join the rendezvous at {addr}:{port}: it belongs to another job" in lines[0]
            and "--job-token" in lines[0]
        ), err
        second = node(addr, port, 1, "job-a", tmp_path, *rdzv)
        outs = [p.communicate(timeout=120) for p in (first, second)]
        assert [first.returncode, second.returncode] == [0, 0], outs
        assert sorted(p.name for p in tmp_path.glob("rank_*.json")) == [
            "rank_0_attempt_0.json",
            "rank_1_attempt_0.json",
        ]
    finally:
        for p in (first,):
            if p.poll() is None:
                p.kill()
