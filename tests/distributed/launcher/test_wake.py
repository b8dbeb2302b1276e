"""A stopped worker is woken before torch's close signals it (stopping.py, ``waking_first``).

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_wake.py``

Real processes: a child in its own process group is SIGSTOPped, then "closed" the way torch's
context closes workers (SIGTERM, then wait). Without the SIGCONT the SIGTERM stays pending in
the stopped child and the wait runs out; with it the child ends at once. The end-to-end case
is test_launcher.py's ``stop1`` (a rank that SIGSTOPs itself), where CI once saw torch's poll
find the failed rank before an earlier pre-poll check did, and the stopped rank was SIGKILLed
after torch's 30 s grace.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from neural_arch.distributed.launcher.stacks import STACKS_SIGNAL, handles
from neural_arch.distributed.launcher.stopping import KILL_WAIT, stat_fields, waking_first


def stopped_child() -> subprocess.Popen:
    # Like a worker, it handles the stack-dump signal the agent sends before the close (stacks.py).
    program = (
        f"import signal, time; signal.signal({int(STACKS_SIGNAL)}, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", program], start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"  # the handler is set before it is stopped
    os.kill(child.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # wait until the kernel reports it stopped ("T")
        if (stat_fields(Path(f"/proc/{child.pid}/stat")) or [""])[0] == "T":
            return child
        time.sleep(0.01)
    raise AssertionError("the child did not stop")


def close_like_torch(child: subprocess.Popen, waited: list[bool]) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(3)
        waited.append(True)
    except subprocess.TimeoutExpired:
        waited.append(False)


def test_a_stopped_worker_takes_the_close_signal_at_once():
    child, waited = stopped_child(), []
    try:
        not_crashed = lambda: False  # e.g. a rank stopped on request: the others keep their grace
        listening = lambda local_rank, pid: True  # it said it writes its stacks (channel.py)
        waking_first(lambda: close_like_torch(child, waited), lambda: {0: child.pid}, not_crashed, listening)()
        assert waited == [True] and child.returncode == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def test_after_a_crash_the_close_kills_at_once():
    """torch's poll closes with no arguments; after a crashed rank the others get SIGKILL, not a grace."""
    child, asked = stopped_child(), []
    try:
        waking_first(lambda *args: asked.append(args), lambda: {0: child.pid}, lambda: True)()
        assert asked == [(signal.SIGKILL, KILL_WAIT)]
        # A close with arguments (a stop or a membership change) is passed on as it is.
        waking_first(lambda *args: asked.append(args), lambda: {0: child.pid}, lambda: True)(signal.SIGTERM, 5)
        assert asked[-1] == (signal.SIGTERM, 5)
    finally:
        child.kill()
        child.wait()


def test_without_the_wake_the_stopped_worker_holds_the_signal():
    """The control: the same close alone leaves the stopped child running past the wait."""
    child, waited = stopped_child(), []
    try:
        close_like_torch(child, waited)
        assert waited == [False] and child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_worker_still_starting_is_not_sent_the_stack_signal():
    """Before a worker installs its stack handler, the signal's default action would kill it (and
    the summary would blame it): the agent sends it only to processes that catch it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        time.sleep(0.5)
        assert not handles(child.pid, STACKS_SIGNAL)
        waited = []
        listening = lambda local_rank, pid: True  # said so, then exec'd another program, say
        waking_first(lambda: close_like_torch(child, waited), lambda: {0: child.pid}, lambda: False, listening)()
        assert waited == [True] and child.returncode == -signal.SIGTERM  # not killed by the stack signal
    finally:
        child.kill()
        child.wait()


def test_a_worker_that_did_not_say_it_listens_is_not_sent_the_stack_signal(tmp_path):
    """A script's own handler of the signal is not the launcher's to run: only a worker that said,
    through the launcher's channel, that it writes its stacks on it is sent it."""
    ran = tmp_path / "handler_ran"
    program = (
        f"import signal, time; signal.signal({int(STACKS_SIGNAL)}, lambda *_: open({str(ran)!r}, 'w').close()); "
        "print('ready', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", program], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready" and handles(child.pid, STACKS_SIGNAL)
        waited = []
        waking_first(lambda: close_like_torch(child, waited), lambda: {0: child.pid}, lambda: False)()
        assert waited == [True] and child.returncode == -signal.SIGTERM and not ran.exists()
    finally:
        child.kill()
        child.wait()
