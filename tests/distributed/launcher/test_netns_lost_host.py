"""A whole host lost mid-run, then back: an elastic 2-node job (``--nnodes=1:2``) on namespace hosts.

Run (as root): ``.venv/bin/python -m pytest tests/distributed/launcher/test_netns_lost_host.py -q``

Two hosts of tests/helpers/netns.py, one launcher each (c10d rendezvous hosted by A, one
worker a node), train the tiny float64 MLP with a checkpoint every 4 steps and the default
``training.timeout`` (600 s). A starts alone and is held after step 6; B joins (A's worker
saves at step 6, the group re-forms at 2 nodes: ``world 2, step 6``); both are held after step
10 (newest checkpoint: 8). Then host B vanishes: every packet in and out of its link is
dropped and every process on it (its launcher and its rank) is SIGKILLed, so nothing of B
answers, not even a TCP reset. A's rank goes on into step 11's collective and waits; then:

(a) A's launcher names B's node, its address and its rank (``node 1 at ADDR (launcher pid P,
    rank 1) is lost: no rendezvous keep-alive for N s``, launcher/lost_nodes.py) with
    ``N <= 60``, the job's own clock: B's last keep-alive was sent before the cut, so N bounds
    cut -> line from above. A's group re-forms alone (``world 1``) from the newest disk
    checkpoint (step 8: memory recovery does not exist yet) and trains on, held after step 12.
(b) B's link comes back and its launcher is started again: it joins, A's worker saves at
    step 12, the group re-forms at 2 nodes (``world 2, step 12``) and runs to step 16.

The final weights must equal those of an uninterrupted 1-process run of the same config
computed in the test (atol 1e-10: float64, only the summation order differs between world
sizes, as tests/training/test_elastic.py states it). Runtime: 146 s on 2 shared cores (load 8).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.cli import LAUNCHER, cli
from tests.helpers.multiproc import free_port
from tests.helpers.netns import Host, hosts, netns_unavailable
from tests.helpers.paths import SCRIPTS
from tests.helpers.run_outputs import assert_params, final_params
from tests.helpers.trainer_runs import BASE

pytestmark = [
    pytest.mark.machine,  # network namespaces: one multi-host test at a time
    pytest.mark.multiprocess,
    pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable())),
]

PACED = str(SCRIPTS / "train_paced.py")
TIMEOUT = 600
"""training.timeout, the default: A's rank waits that long in its collective, so naming B
and going on must come from the launchers' rendezvous keep-alive, not from the timeout."""
NAMED_WITHIN = 60
"""The acceptance's bound (issue 36): seconds from the lost host's last keep-alive to the line naming it."""
JOIN, CUT, REJOIN = 6, 10, 12
"""B joins while A is held after step JOIN; it vanishes after step CUT (newest checkpoint: 8) and
comes back while A is held after step REJOIN."""
SETTINGS = ("training.steps=16", f"training.timeout={TIMEOUT}", "schedule.decay=constant", "logging.every_steps=1")
ARGS = [*BASE, *(arg for setting in SETTINGS for arg in ("--set", setting))]


def start(host: Host, master: Host, port: int, root: Path, attempt: str) -> subprocess.Popen:
    """``host``'s launcher of the elastic job whose c10d store ``master`` hosts."""
    conf = f"is_host={int(host is master)}"
    cmd = [
        *LAUNCHER,
        "--nnodes=1:2",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={master.addr}:{port}",
        "--rdzv_id=lost-host",
        f"--rdzv_conf={conf}",
        f"--local_addr={host.addr}",
        "--max_restarts=3",
        PACED,
        str(root / "gate"),
        *ARGS,
        "--set",
        f"run.dir={root / 'run'}",
    ]
    log = root / f"{host.hostname}{attempt}.log"
    with open(log, "w") as out:
        proc = host.popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
    proc.log_path = log  # type: ignore[attr-defined]
    return proc


def output(procs: list[subprocess.Popen]) -> str:
    return "\n".join(f"--- {p.log_path.name}:\n{p.log_path.read_text()}" for p in procs)  # type: ignore[attr-defined]


def starts(run: Path) -> list[str]:
    """Rank 0's ``world W, step S`` start lines, one per attempt (rank 0 is A's: A starts first)."""
    log = run / "logs" / "rank_0.log"
    return re.findall(r"start: (world \d+, step \d+)", log.read_text() if log.exists() else "")


def last_step(run: Path) -> int:
    rows = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    return max((int(m.group(1)) for m in (re.search(r'"step": (\d+)', r) for r in rows) if m), default=0)


def wait_until(check, what: str, timeout: float, procs: list[subprocess.Popen]) -> None:
    """Poll ``check()``; fails with every launcher's output on timeout or when A's launcher ended."""
    deadline = time.monotonic() + timeout
    while not check():
        if procs[0].poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f} s (A: {procs[0].poll()})\n{output(procs)}")
        time.sleep(0.1)


def silent_for(text: str, host: Host) -> int:
    """``N`` of A's launcher line naming ``host``'s node and its rank (``lost_nodes.py``):
    ``node R at ADDR (launcher pid P, rank R) is lost: no rendezvous keep-alive for N s; ...``."""
    line = rf"node (\d+) at {re.escape(host.addr)} \(launcher pid \d+, rank (\d+)\) is lost: no rendezvous keep-alive"
    found = re.search(line + r" for (\d+) s; the group re-forms without it", text)
    return int(found.group(3)) if found and found.group(1) == found.group(2) else -1


@pytest.mark.timeout(600)
def test_a_lost_host_is_named_the_survivor_goes_on_alone_and_the_host_rejoins_exactly(tmp_path):
    gate, run, port = tmp_path / "gate", tmp_path / "run", free_port()
    gate.mkdir()
    for step in (JOIN, CUT, REJOIN):
        (gate / f"hold_{step}").touch()
    with hosts(2) as (a, b):
        procs = [start(a, a, port, tmp_path, "")]
        reference = tmp_path / "reference"  # meanwhile: the uninterrupted 1-process run
        ref = cli("train", *ARGS, "--set", f"run.dir={reference}")
        assert ref.returncode == 0, ref.stderr
        wait_until(lambda: last_step(run) >= JOIN, f"A alone at step {JOIN}", 240, procs)
        procs.append(start(b, a, port, tmp_path, ""))
        wait_until(lambda: last_step(run) >= CUT and "world 2" in starts(run)[-1], f"2 ranks at step {CUT}", 240, procs)
        b.drop(True)  # host B vanishes: no packet in or out, and nothing of it runs
        b.kill_all()
        (gate / f"hold_{CUT}").unlink()  # A's rank goes on into the next step's collectives
        a_log = procs[0].log_path  # type: ignore[attr-defined]
        # (a) named by A's launcher, then A goes on alone from the newest disk checkpoint
        wait_until(lambda: silent_for(a_log.read_text(), b) >= 0, f"line naming {b.addr}", 180, procs)
        named = silent_for(a_log.read_text(), b)  # B's last keep-alive was sent before the cut: N bounds cut -> line
        assert named <= NAMED_WITHIN, output(procs)
        wait_until(lambda: last_step(run) >= REJOIN and "world 1" in starts(run)[-1], "A alone", 240, procs)
        # (b) B is back: its link up, its launcher started again; it joins, and the group grows to 2
        b.drop(False)
        procs.append(start(b, a, port, tmp_path, "-again"))
        wait_until(lambda: "world 2" in starts(run)[-1], "the group re-formed at 2 nodes", 240, procs)
        (gate / f"hold_{REJOIN}").unlink()
        for proc in (procs[0], procs[2]):
            try:
                code = proc.wait(timeout=240)
            except subprocess.TimeoutExpired:
                code = None
            assert code == 0, output(procs)
    want = ["world 1, step 0", f"world 2, step {JOIN}", "world 1, step 8", f"world 2, step {REJOIN}"]
    assert starts(run) == want, (starts(run), output(procs))
    assert_params(final_params(run), final_params(reference), atol=1e-10)
    print(f"{b.addr} named {named} s after its last keep-alive (training.timeout {TIMEOUT} s)")
