"""A worker dies with its launcher, also when the launcher died before the worker could ask
the kernel to watch it (lifeline.py). The whole-job version, SIGKILL of a real launcher, is
in test_exposure.py.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_orphans.py -q``

Each case has three real processes: this test, a "launcher" stand-in, and its "worker",
which calls ``die_with_parent(launcher pid)`` and would otherwise sleep for ten minutes; the
thread case takes the path used elsewhere than Linux (no prctl: a thread checks the parent).
The verdict is why the worker ended, not how fast: the worker records every ``os.kill`` it
sends itself (and which thread sent it) in a file, so each case names its own killer: the
start-up check on the main thread, the kernel (no record), or the watching thread. The only
clock is a generous guard against a hang. About 10 s for the three cases.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers.proc_tree import alive

pytestmark = pytest.mark.multiprocess

WORKER = textwrap.dedent("""
    import os, sys, threading, time
    from neural_arch.distributed.launcher import lifeline
    parent, how, record = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    kill = os.kill
    def recorded_kill(pid, signum):  # who ends this process, written before it ends
        with open(record, "a") as f:
            f.write(f"{threading.current_thread().name} {int(signum)}\\n")
        kill(pid, signum)
    os.kill = recorded_kill
    if how == "thread-after-arming":  # as elsewhere than Linux: no prctl, a thread checks
        lifeline._PRCTL = None
    while how == "exit-at-once" and os.getppid() == parent:  # the case is a parent gone before the call
        time.sleep(0.01)
    lifeline.die_with_parent(parent)
    print("armed", flush=True)
    time.sleep(600)
    with open(record, "a") as f:
        f.write("slept out\\n")
""")
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    at_once = sys.argv[2] == "exit-at-once"
    # At once: the worker's output goes nowhere, so a closed pipe cannot be what ends it.
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), *sys.argv[2:]],
                              stdout=subprocess.DEVNULL if at_once else subprocess.PIPE, text=True)
    print(worker.pid, flush=True)
    if at_once:  # gone while the worker still imports torch (the worker waits for it to be gone)
        sys.exit(0)
    assert worker.stdout.readline() == "armed\\n"
    print("armed", flush=True)
    time.sleep(60)
""")


HANG_GUARD = 45.0
"""Seconds a worker may outlive its launcher before the test calls it a hang; no verdict on speed."""
KILLED_BY = {
    "exit-at-once": ["MainThread 9"],  # die_with_parent saw a new parent at once and SIGKILLed itself
    "sigkill-after-arming": [],  # the kernel's PR_SET_PDEATHSIG: no os.kill in the worker
    "thread-after-arming": ["die-with-parent 9"],  # the watching thread, not the main thread
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", list(KILLED_BY))
def test_worker_dies_with_its_launcher(how, tmp_path):
    record = tmp_path / "kills"
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, WORKER, how, str(record)], stdout=subprocess.PIPE, text=True
    )
    worker = None
    try:
        worker = int(launcher.stdout.readline())
        if how != "exit-at-once":
            assert launcher.stdout.readline() == "armed\n"
            launcher.kill()
        launcher.wait(timeout=HANG_GUARD)
        start = time.monotonic()
        while alive({worker}):  # it sleeps ten minutes: only a kill ends it within the guard
            assert time.monotonic() - start < HANG_GUARD, f"worker {worker} outlived its launcher ({how})"
            time.sleep(0.05)
        kills = record.read_text().splitlines() if record.exists() else []
        assert kills == KILLED_BY[how], f"{how}: the worker's own kills were {kills}"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        if worker is not None and alive({worker}):
            os.kill(worker, signal.SIGKILL)
