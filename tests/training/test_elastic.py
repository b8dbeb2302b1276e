"""Elastic membership, exact: a node joins and a node leaves mid-training (``--nnodes=1:2``).

Run: ``.venv/bin/python -m pytest tests/training/test_elastic.py``
Two launcher agents on this machine play two nodes (c10d rendezvous on 127.0.0.1, one
worker each). Node A starts alone and is held after step 4; node B joins: A's agent sees
it waiting, stops its worker (which saves on SIGTERM) and the group re-forms at 2 ranks,
resuming from that checkpoint. Both are held after step 10 (checkpoint at 8); node B is
SIGKILLed, agent and worker (a node lost); A's worker fails in its next collective and A
restarts alone from step 8. The float64 result must
equal a 1-process run of the same config within 1e-10 (only summation order differs) and
the sample log must hold every step once, with the same samples as the reference.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neural_arch.utils.ports import free_port
from tests.helpers.cli import cli
from tests.helpers.proc_tree import process_tree
from tests.helpers.run_outputs import assert_params, final_params, sample_ids
from tests.helpers.trainer_runs import BASE

PACED = str(Path(__file__).resolve().parents[1] / "scripts" / "train_paced.py")
STEPS = 16
ARGS = [
    *BASE,
    "--set",
    f"training.steps={STEPS}",
    "--set",
    "schedule.decay=constant",
    "--set",
    "logging.record_samples=true",
    "--set",
    "training.timeout=30",
]


def _node(port: int, run: Path, log: Path, gate: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "neural_arch.distributed.launcher",
        "--nnodes=1:2",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{port}",
        "--rdzv_id=elastic-test",
        "--rdzv_conf=last_call_timeout=1",
        "--max_restarts=3",
        PACED,
        str(gate),
        *ARGS,
        "--set",
        f"run.dir={run}",
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _last_step(run: Path) -> int:
    steps = sample_ids(run, 0)
    return max(steps, default=0)


def _wait(what: str, check, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _starts(run: Path) -> list[str]:
    """Rank 0's 'start: world W, step S ...' lines, one per attempt, oldest first (whichever node held rank 0)."""
    log = run / "logs" / "rank_0.log"
    return [
        line.split("start: ", 1)[1]
        for line in (log.read_text().splitlines() if log.exists() else ())
        if "start: world" in line
    ]


def _kill_node(agent: subprocess.Popen) -> None:
    """SIGKILL a node at once: its agent and every process under it (workers lead their own groups)."""
    for pid in process_tree(agent.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    agent.wait(timeout=30)


@pytest.mark.multiprocess
def test_node_joins_then_leaves_mid_training_exactly(tmp_path):
    reference = tmp_path / "reference"
    ref = cli("train", *ARGS, "--set", f"run.dir={reference}")
    assert ref.returncode == 0, ref.stderr
    run, port, gate = tmp_path / "run", free_port(), tmp_path / "gate"
    gate.mkdir()
    for step in (4, 10):
        (gate / f"hold_{step}").touch()
    node_a = _node(port, run, tmp_path / "a.log", gate)
    node_b = None
    try:
        _wait("node A at step 4", lambda: _last_step(run) >= 4)
        node_b = _node(port, run, tmp_path / "b.log", gate)
        _wait("2 ranks at step 10", lambda: _last_step(run) >= 10 and "world 2" in _starts(run)[-1])
        _kill_node(node_b)
        (gate / "hold_10").unlink()
        assert node_a.wait(timeout=150) == 0, (tmp_path / "a.log").read_text()
    finally:
        for node in (node_a, node_b):
            if node is not None and node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
    starts = _starts(run)
    assert [s.split(" (")[0] for s in starts] == ["world 1, step 0", "world 2, step 4", "world 1, step 8"], starts
    assert_params(final_params(run), final_params(reference), atol=1e-10)
    got, want = sample_ids(run, 1), sample_ids(reference, 1)
    assert sorted(got) == list(range(1, STEPS + 1))
    for step in got:  # each step once, with the reference's samples: none skipped or repeated
        assert sorted(got[step]) == sorted(want[step]), step
