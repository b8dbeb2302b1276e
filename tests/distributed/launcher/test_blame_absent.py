"""A rank that did not arrive is the cause; the survivor that timed out waiting for it is the symptom.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_blame_absent.py -q`` (in-process,
under a second: injected failure records, which carry their own times). The same with real ranks,
rank 1 SIGSTOPped while rank 0 waits in DDP's backward: tests/distributed/launcher/test_hang_evidence.py.
"""

from neural_arch.distributed.launcher.blame import absent_peers, causes, restart_notice
from neural_arch.distributed.launcher.failures import format_failure_summary
from neural_arch.distributed.launcher.records import FailureRecord

TIMEOUT = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation"
CLOSED = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:11162."
DIAGNOSIS = "rank 0 timed out in collective #13; did not arrive: rank 1 (silent for 11 s: stopped or dead) on vm"


def stack(error: str) -> str:
    frame = '  File "/home/u/train.py", line 34, in <module>\n    loss.backward()\n'
    return f"Traceback (most recent call last):\n{frame}{error}\n"


def record(rank, error=None, at=100.0, diagnosis=None, signal=None, stopped=False):
    message = "killed"
    if error is not None:
        info = {"py_callstack": stack(error), "timestamp": str(int(at)), "failed_at": f"{at:.3f}"}
        message = {"message": error, "extraInfo": info | ({"diagnosis": diagnosis} if diagnosis else {})}
    return FailureRecord(0, rank, rank, 10 + rank, -9 if signal else 1, signal, message, int(at) + 1, stopped)


def test_the_absent_rank_is_the_cause_and_the_timeout_its_consequence():
    survivor = record(0, TIMEOUT, at=100.0, diagnosis=DIAGNOSIS)
    stopped = record(1, signal="SIGKILL", at=103.0, stopped=True)  # woken, then killed by the launcher
    assert absent_peers(survivor) == {1: "silent for 11 s: stopped or dead"}
    assert [r.rank for r in causes([survivor, stopped])] == [1, 0]
    assert restart_notice([survivor, stopped], "vm", None, 2, 2) == (
        "neural_arch launcher: rank 1 (host vm, pid 11) did not arrive (silent for 11 s: stopped or dead): "
        "rank 0 timed out in collective #13 waiting for it; then killed by signal SIGKILL (stopped by the launcher); "
        "rank 0 failed as a consequence "
        "(RuntimeError: timed out). Restarting the group: attempt 2 of 2."
    )
    woken = record(1, CLOSED, at=102.0)  # woken to write its stacks, it ran on into the closed group
    summary = format_failure_summary([survivor, woken], None, 0)
    assert "root cause: attempt 0, rank 1 (local rank 1, pid 11): did not arrive (silent for 11 s" in summary
    assert "waiting for it; then raised RuntimeError: connection closed by peer\n" in summary, summary
    assert "rank 0, attempt 0: RuntimeError: timed out, a consequence" in summary, summary


def test_several_absent_ranks_and_our_collectives_own_message_are_read():
    line = "rank 0 timed out in collective call #3 (all_reduce); did not arrive: rank 1 (entered only 2 "
    line += "collective calls; now in barrier) on a, rank 2 (never reported)"
    own = record(0, f"neural_arch.distributed.runtime.calls.CollectiveFailed: {line}")  # no separate diagnosis
    assert absent_peers(own) == {1: "entered only 2 collective calls; now in barrier", 2: "never reported"}
    woken = "CollectiveFailed: rank 1 failed in collective call #1; did not arrive: rank 0 (left the process group)"
    woken += f" on vm ({CLOSED})"
    late = record(1, woken, at=104.0)  # the stopped rank, woken for its stacks, names the survivor that left
    assert absent_peers(late) == {0: "left the process group"}
    assert [r.rank for r in causes([own, late])] == [1, 0]  # the first timeout's word counts
    assert absent_peers(record(0, TIMEOUT)) == {}  # no diagnosis: nobody named, the old order holds
    assert [r.rank for r in causes([record(0, TIMEOUT), record(1, signal="SIGKILL", at=103.0, stopped=True)])] == [0, 1]
