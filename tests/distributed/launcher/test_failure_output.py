"""Failure output that reads right: the cause named first, a peer's effects in one line, the user's line.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_failure_output.py``
The first tests judge injected failure records in this process (no timing: the records carry
their times); the last two start the launcher on 2 workers.
"""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from neural_arch.distributed.launcher import logpump
from neural_arch.distributed.launcher.blame import causes, is_collateral, restart_notice
from neural_arch.distributed.launcher.failures import format_failure_summary, usage_error_line
from neural_arch.distributed.launcher.log_format import attempt_header, log_path
from neural_arch.distributed.launcher.logpump import LOG_ONLY
from neural_arch.distributed.launcher.records import FailureRecord
from neural_arch.distributed.launcher.restart_policy import failed_alike
from tests.helpers.cli import launch
from tests.helpers.paths import SCRIPTS

PROBE = str(SCRIPTS / "launch_probe.py")
TORCH = os.path.join(sysconfig.get_paths()["purelib"], "torch", "distributed", "distributed_c10d.py")
COLLATERAL = [
    "RuntimeError: [../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:51367: Connection reset by peer.",
    "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:11162.",
    "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.",
    "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation",
    "RuntimeError: [../gloo/transport/tcp/pair.cc:598] Write error: Broken pipe",
]


def stack(error: str, own: str = "/home/u/train.py", line: int = 12, library: bool = True) -> str:
    frames = f'  File "{own}", line 30, in <module>\n    main()\n  File "{own}", line {line}, in main\n    step()\n'
    if library:
        frames += f'  File "{TORCH}", line 3252, in all_reduce\n    work.wait()\n'
    return f"Traceback (most recent call last):\n{frames}{error}\n"


def record(rank, error=None, at=100.0, attempt=0, signal=None, stopped=False):
    message = "killed"
    if error is not None:
        message = {"message": error, "extraInfo": {"py_callstack": error, "timestamp": str(int(at))}}
        message["extraInfo"]["failed_at"] = f"{at:.3f}"
    return FailureRecord(attempt, rank, rank, 10 + rank, -9 if signal else 1, signal, message, int(at) + 1, stopped)


@pytest.mark.parametrize("error", COLLATERAL)
def test_a_peers_closed_connection_or_timeout_is_collateral_and_a_users_error_is_not(error):
    assert is_collateral(record(0, stack(error)))
    assert not is_collateral(record(0, stack("KeyError: 'lr'", library=False)))
    assert not is_collateral(record(1, signal="SIGKILL"))
    assert is_collateral(record(1, signal="SIGTERM", stopped=True))  # the launcher stopping the rest


def test_the_root_cause_is_the_first_cause_by_time_never_a_survivors_collateral_error():
    survivor = record(0, stack(COLLATERAL[0]), at=100.0)  # recorded before the killed rank was noticed
    killed = record(1, signal="SIGKILL", at=101.0)
    assert [r.rank for r in causes([survivor, killed])] == [1, 0]
    late_bug, early_bug = record(2, stack("ValueError: late"), at=100.5), record(3, stack("KeyError: 'x'"), at=100.2)
    assert [r.rank for r in causes([survivor, late_bug, early_bug])] == [3, 2, 0]


def test_the_user_frame_is_named_beside_the_librarys_innermost_frame():
    bug = record(1, stack("KeyError: 'lr'", library=False), at=100.0)
    text = format_failure_summary([record(0, stack(COLLATERAL[1]), at=99.0), bug], None, 0)
    assert "root cause: attempt 0, rank 1 (local rank 1, pid 11): raised KeyError: 'lr' at /home/u/train.py:12" in text
    inside = record(1, stack("RuntimeError: bad shape"), at=100.0)
    text = format_failure_summary([inside], None, 0)
    assert "at /home/u/train.py:12 in main (in torch/distributed/distributed_c10d.py:3252 in all_reduce)" in text


def test_collateral_tracebacks_are_one_line_and_ranks_failing_alike_are_named_together():
    records = [
        r for a in (0, 1) for r in (record(1, signal="SIGKILL", attempt=a), record(0, stack(COLLATERAL[0]), attempt=a))
    ]
    text = format_failure_summary(records, Path("/runs/x/logs"), 1)
    assert "root cause: attempt 0, rank 1 (local rank 1, pid 11): killed by signal SIGKILL" in text
    assert "Traceback" not in text and "pair.cc" not in text
    assert "rank 0, attempts 0-1: RuntimeError: connection reset by peer, a consequence" in text
    assert "/runs/x/logs/rank_N.log" in text
    alike = [record(rank, stack("KeyError: 'lr'"), at=100.0 + rank) for rank in (0, 1)]
    assert "root cause: attempt 0, every rank alike (ranks 0 and 1, attempt 0): raised KeyError" in (
        format_failure_summary(alike, None, 3)
    )


def test_an_error_raised_alike_on_every_rank_at_the_first_attempt_is_not_retried():
    alike = [record(rank, stack("KeyError: 'lr'")) for rank in (0, 1)]
    assert "all 2 ranks failed with the same KeyError at /home/u/train.py:12 in main" in failed_alike(
        alike, 0, 2, False
    )
    assert failed_alike(alike, 0, 2, progressed=True) is None  # a checkpoint was saved: maybe data-dependent
    assert failed_alike(alike[:1], 0, 2, False) is None  # one rank of two: retried
    assert failed_alike(alike[:1], 0, 1, False) is None  # one process: retried once (repeated_failure stops it)
    outside = [record(rank, stack("FileNotFoundError: [Errno 2] /nfs/x")) for rank in (0, 1)]
    assert failed_alike(outside, 0, 2, False) is not None
    flaky = [record(rank, stack("OSError: [Errno 5] Input/output error")) for rank in (0, 1)]
    assert failed_alike(flaky, 0, 2, False) is None  # the outside world may recover
    lost = [record(rank, stack(COLLATERAL[3])) for rank in (0, 1)]
    assert failed_alike(lost, 0, 2, False) is None


def test_the_restart_notice_is_one_line_with_rank_host_signal_step_and_attempt():
    line = restart_notice([record(0, stack(COLLATERAL[0])), record(1, signal="SIGKILL")], "node7", "step 100", 2, 4)
    assert line == (
        "neural_arch launcher: rank 1 (host node7, pid 11) killed by signal SIGKILL; rank 0 failed as a consequence "
        "(RuntimeError: connection reset by peer); last checkpoint saved: step 100. "
        "Restarting the group: attempt 2 of 4."
    )


def test_a_usage_error_is_one_line_saying_why_not_restarted_whichever_rank_said_it_first(tmp_path):
    said = "neural-arch train: error: run.dir='r' is in use by another job (pid 7 on vm: ...)"
    usage = FailureRecord(0, 1, 1, 11, 2, None, "exit 2", 101, usage_error=said)
    stopped = FailureRecord(0, 0, 0, 10, -15, "SIGTERM", "killed", 102, True)
    dump = ["Current thread 0x00007f02 (most recent call first):", '  File "/x/launcher/worker.py", line 9 in f']
    for rank0_printed, quoted in (([said, *dump], False), (["starting", *dump], True)):
        log = log_path(tmp_path, 0)
        log.write_text("\n".join([attempt_header(0, "0", 10), *rank0_printed]) + "\n")
        line = usage_error_line([usage, stopped], tmp_path)
        assert line is not None and "not restarted: rank(s) 1 exited with code 2" in line, line
        assert "a restart would give the same answer" in line and line.endswith(said) == quoted, line


def test_the_log_pump_keeps_marked_lines_off_the_console(tmp_path):
    log = tmp_path / "rank_0.log"
    data = b"shown\n" + LOG_ONLY + b"Traceback (most recent call last):\n" + LOG_ONLY + b"RuntimeError: x\n"
    with open(log, "wb") as f:
        command = [sys.executable, logpump.__file__, "[rank 0] ", str(f.fileno()), "1"]
        out = subprocess.run(command, input=data, capture_output=True, pass_fds=(f.fileno(),), timeout=60).stdout
    assert out == b"[rank 0] shown\n"
    assert log.read_bytes() == b"shown\nTraceback (most recent call last):\nRuntimeError: x\n"


def console_of(proc: subprocess.CompletedProcess) -> list[str]:
    return (proc.stdout + proc.stderr).splitlines()


@pytest.mark.multiprocess
def test_a_sigkilled_rank_is_one_launcher_line_and_no_survivor_traceback(tmp_path):
    proc = launch("--nproc_per_node=2", "--max_restarts=1", PROBE, str(tmp_path), "kill1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = [line for line in console_of(proc) if "SIGKILL" in line]
    assert len(said) == 1 and said[0].startswith("neural_arch launcher: rank 1 (host "), console_of(proc)
    assert said[0].endswith("Restarting the group: attempt 2 of 2."), said
    assert "Traceback" not in proc.stderr and "pair.cc" not in proc.stderr, proc.stderr


@pytest.mark.multiprocess
def test_a_keyerror_on_rank_1_names_rank_1_and_the_users_line_as_the_root_cause(tmp_path):
    line = next(i for i, text in enumerate(Path(PROBE).read_text().splitlines(), 1) if "return table[key]" in text)
    proc = launch("--nproc_per_node=2", "--max_restarts=1", PROBE, str(tmp_path), "keyerror1")
    assert proc.returncode == 1
    root = [text for text in console_of(proc) if "root cause:" in text]
    assert len(root) == 1 and root[0].startswith("  root cause: attempt 0, rank 1 (local rank 1, pid "), root
    assert root[0].endswith(f"raised KeyError: 'learning_rate' at {os.path.relpath(PROBE)}:{line} in lookup"), root
    assert "[rank 0] Traceback" not in proc.stderr  # rank 0's lost connection: its log, not the console
