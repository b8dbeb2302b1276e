"""A worker dies with its launcher, also when the launcher died before the worker could ask
the kernel to watch it (lifeline.py). The whole-job version, SIGKILL of a real launcher, is
in test_exposure.py.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_orphans.py -q``

Each case has three real processes: this test, a "launcher" stand-in, and its "worker",
which calls ``die_with_parent(launcher pid)`` and would otherwise sleep for a minute; the
thread case takes the path used elsewhere than Linux (no prctl: a thread checks the parent).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers.proc_tree import alive

pytestmark = pytest.mark.multiprocess

WORKER = textwrap.dedent("""
    import sys, time
    from neural_arch.distributed.launcher import lifeline
    if sys.argv[2] == "thread-after-arming":  # as elsewhere than Linux: no prctl, a thread checks
        lifeline._PRCTL = None
    lifeline.die_with_parent(int(sys.argv[1]))
    print("armed", flush=True)
    time.sleep(60)
""")
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    at_once = sys.argv[2] == "exit-at-once"
    # At once: the worker's output goes nowhere, so a closed pipe cannot be what ends it.
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]],
                              stdout=subprocess.DEVNULL if at_once else subprocess.PIPE, text=True)
    print(worker.pid, flush=True)
    if at_once:  # gone while the worker still imports torch (seconds)
        sys.exit(0)
    assert worker.stdout.readline() == "armed\\n"
    print("armed", flush=True)
    time.sleep(60)
""")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["exit-at-once", "sigkill-after-arming", "thread-after-arming"])
def test_worker_dies_with_its_launcher(how):
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, WORKER, how], stdout=subprocess.PIPE, text=True)
    try:
        worker = int(launcher.stdout.readline())
        if how != "exit-at-once":
            assert launcher.stdout.readline() == "armed\n"
            launcher.kill()
        launcher.wait(timeout=10)
        start = time.monotonic()
        while alive({worker}):  # exit-at-once: it must notice at start-up; else the kernel kills it
            assert time.monotonic() - start < 20, f"worker {worker} outlived its launcher ({how})"
            time.sleep(0.05)
        if how == "thread-after-arming":  # the thread checks the parent once a second
            assert time.monotonic() - start < 3, f"the watching thread took {time.monotonic() - start:.1f} s"
    finally:
        if launcher.poll() is None:
            launcher.kill()
