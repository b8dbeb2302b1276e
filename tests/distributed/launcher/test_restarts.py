"""The restart policy: a deterministic bug stops after two identical failures; progress
(a saved checkpoint) keeps restarts going; the summary prints each traceback once.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_restarts.py -q``
"""

import os
import subprocess

import pytest

from neural_arch.distributed.launcher.channel import STOP, USAGE, forget, heard, open_channel, tell
from neural_arch.distributed.launcher.failures import format_failure_summary
from neural_arch.distributed.launcher.records import FailureRecord
from neural_arch.distributed.launcher.restart_policy import repeated_failure, step_of, stopped_on_request, usage_error
from tests.helpers.cli import LAUNCHER

BUG = "RuntimeError: simulated deterministic bug"

# Rank 1 raises at the same place on every attempt; with SAVE it first saves a checkpoint
# (progress), so each attempt's identical failure comes after new work.
SCRIPT = """
import os, sys, torch
import neural_arch.distributed as nd
nd.init_process_group()
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
print(f"rank {nd.get_rank()} attempt {attempt}", flush=True)
if sys.argv[1] == "save":
    nd.save_checkpoint(sys.argv[2], int(attempt), {"attempt": int(attempt)})
def train_step():
    if nd.get_rank() == 1:
        raise RuntimeError("simulated deterministic bug")
train_step()
nd.all_reduce(torch.ones(1))
"""


def run(tmp_path, mode: str, max_restarts: int) -> subprocess.CompletedProcess:
    script = tmp_path / "bug.py"
    script.write_text(SCRIPT)
    cmd = LAUNCHER + [
        "--nproc_per_node=2",
        f"--max_restarts={max_restarts}",
        "--timeout=20",
        str(script),
        mode,
        str(tmp_path / "checkpoints"),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def summary(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr[proc.stderr.index("neural_arch launcher: job failed") :]


@pytest.mark.multiprocess
def test_identical_failure_stops_after_two_attempts_with_one_traceback(tmp_path):
    proc = run(tmp_path, "plain", max_restarts=3)
    assert proc.returncode == 1, proc.stderr
    text = summary(proc)
    assert text.startswith("neural_arch launcher: job failed after 2 attempt(s) (max_restarts=3).")
    where = f"{tmp_path / 'bug.py'}:11 in train_step"  # the user's file as given, and its line
    assert f"not restarted again: rank 1 failed with the same RuntimeError at {where} on attempts 0 and 1" in text
    assert "root cause: attempt 0, rank 1 (local rank 1, pid " in text and f"raised {BUG} at {where}\n" in text
    assert text.count(f"| {BUG}") == 1 and "rank 1, attempts 0-1 (traceback):" in text, text
    assert "rank 1 attempt 2" not in proc.stdout


@pytest.mark.multiprocess
def test_identical_failure_after_a_new_checkpoint_is_restarted(tmp_path):
    proc = run(tmp_path, "save", max_restarts=2)
    assert proc.returncode == 1, proc.stderr
    text = summary(proc)
    assert text.startswith("neural_arch launcher: job failed after 3 attempt(s) (max_restarts=2).")
    assert "not restarted again" not in text
    assert text.count(f"| {BUG}") == 1 and "rank 1, attempts 0-2 (traceback):" in text, text


def record(rank: int, attempt: int, stack: str, signal=None) -> FailureRecord:
    message = {"message": stack.splitlines()[-1], "extraInfo": {"py_callstack": stack}} if stack else "killed"
    return FailureRecord(
        attempt=attempt,
        rank=rank,
        local_rank=rank,
        pid=100 * attempt + rank,
        exitcode=-9 if signal else 1,
        signal=signal,
        message=message,
        timestamp=attempt,
    )


STACK = 'Traceback (most recent call last):\n  File "/x/train.py", line {line}, in step\n    boom()\n{error}\n'


def test_policy_restarts_what_a_restart_can_fix():
    same = [record(1, a, STACK.format(line=7, error="ValueError: bad")) for a in (0, 1)]
    assert "rank 1 failed with the same ValueError at /x/train.py:7 in step" in repeated_failure(same, 1, False)
    assert repeated_failure(same, 1, progressed=True) is None  # a checkpoint in between: progress
    # Stopped with SIGTERM by the launcher while leaving, after it had raised: still the same bug.
    stopped = [record(1, a, STACK.format(line=7, error="ValueError: bad"), signal="SIGTERM") for a in (0, 1)]
    assert repeated_failure(stopped, 1, progressed=False) is not None
    assert repeated_failure(same[:1], 0, progressed=False) is None  # the first failure always restarts
    moved = [same[0], record(1, 1, STACK.format(line=8, error="ValueError: bad"))]
    assert repeated_failure(moved, 1, progressed=False) is None  # another place: not the same failure
    other_rank = [same[0], record(0, 1, STACK.format(line=7, error="ValueError: bad"))]
    assert repeated_failure(other_rank, 1, progressed=False) is None
    killed = [record(1, a, "", signal="SIGKILL") for a in (0, 1)]
    assert repeated_failure(killed, 1, progressed=False) is None  # signals: restart
    peer = [record(1, a, STACK.format(line=7, error="RuntimeError: Connection reset by peer")) for a in (0, 1)]
    assert repeated_failure(peer, 1, progressed=False) is None  # a lost peer: restart
    hang = [record(1, a, STACK.format(line=7, error="RuntimeError: Timed out waiting 5000ms for recv")) for a in (0, 1)]
    assert repeated_failure(hang, 1, progressed=False) is None


def test_summary_prints_identical_tracebacks_once():
    stack = STACK.format(line=7, error="ValueError: bad")
    records = [record(rank, attempt, stack) for attempt in (0, 1) for rank in (0, 1)]
    text = format_failure_summary(records, None, 3, gave_up="rank 0 failed with the same ValueError")
    assert text.count("| ValueError: bad") == 1  # the traceback once (the root cause line names the error)
    assert "  ranks 0 and 1, attempts 0-1 (traceback):" in text
    assert "  not restarted again: rank 0 failed with the same ValueError." in text
    assert text.count("also failed") == 2  # one line per rank, not one per attempt


def ended(rank: int, exitcode: int, **said) -> FailureRecord:
    return FailureRecord(
        attempt=0,
        rank=rank,
        local_rank=rank,
        pid=10 + rank,
        exitcode=exitcode,
        signal=None,
        message="",
        timestamp=0,
        **said,
    )


def test_only_what_a_worker_said_is_a_stop_or_a_usage_error():
    """A script's own exit codes are failures (restarted, as torchrun restarts them); our trainer's
    stop after saving and our commands' usage errors are told through the launcher's channel."""
    assert stopped_on_request([ended(1, 143), ended(0, 130)], 0) is None
    assert usage_error([ended(1, 2)], 0) is None
    assert stopped_on_request([ended(1, 143, stop_signal=15)], 0) == 15
    assert usage_error([ended(1, 2, usage_error="neural-arch train: error: bad")], 0) is not None
    said_but_killed = ended(1, -9, stop_signal=15, stopped_by_launcher=True)
    assert stopped_on_request([said_but_killed], 0) is None


def test_the_channel_hears_only_the_worker_that_spoke(tmp_path):
    error_file = tmp_path / "attempt_0" / "1" / "error.json"
    error_file.parent.mkdir(parents=True)
    env = {"TORCHELASTIC_ERROR_FILE": str(error_file)}
    assert not tell(STOP, "15", env)  # torchrun's worker: nobody opened the channel, nobody listens
    assert heard(str(error_file), STOP) is None and not list(error_file.parent.iterdir())
    assert open_channel(env)  # our worker wrapper does, before the script starts
    assert tell(STOP, "15", env)
    assert heard(str(error_file), STOP, os.getpid()) == "15" and heard(str(error_file), STOP) == "15"
    assert heard(str(error_file), STOP, os.getpid() + 1) is None  # a child of the script cannot speak for it
    assert heard(str(error_file), USAGE) is None
    assert not open_channel({"TORCHELASTIC_ERROR_FILE": os.devnull}) and not open_channel({})
    assert not tell(STOP, "15", {"TORCHELASTIC_ERROR_FILE": os.devnull})
    forget(str(error_file))  # the agent does once the attempt is over: the user's folder as torchrun leaves it
    assert not list(error_file.parent.iterdir()) and not tell(STOP, "15", env)
    assert step_of("step_00000100") == "step 100" and step_of(None) is None
