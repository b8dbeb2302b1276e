"""A 120 s network partition of a 2-node training job (hosts in network namespaces, tests/helpers/netns.py).

Run (as root): ``.venv/bin/python -m pytest tests/distributed/launcher/test_netns_partition.py -q``

Two launchers, one rank each, on two namespace hosts (static rendezvous at host 0, one
restart allowed) train the tiny float64 MLP, held after step 6 (checkpoint at 4). The link
of host 1 is cut (link down, or iptables DROP on its veth) and the ranks are let go into
step 7's collectives. The job must name the silent rank and its host within
``training.timeout + 5`` s of the cut, then wait for the link instead of wedging or giving
up (the agents' store reads wait up to ``--start_timeout``, and node 0's agent waits for
node 1's at every static restart: agent.py's ``_await_every_node``; before, node 0 restarted
alone and spent the job's restarts while the link was down), restart once it is back, resume
from step 4 and end with the weights of an uninterrupted 1-process run (atol 1e-10: only
the summation order differs). How long after the link's return the job resumes is TCP's:
a request sent during the cut is retransmitted with exponential backoff, up to
``net.ipv4.tcp_rto_max_ms`` (120 s by default) apart, so the bound allows that much.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.cli import LAUNCHER, cli
from tests.helpers.multiproc import free_port
from tests.helpers.netns import Host, hosts, netns_unavailable, node_flags
from tests.helpers.paths import SCRIPTS
from tests.helpers.run_outputs import assert_params, final_params
from tests.helpers.trainer_runs import BASE

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable())),
]

PACED = str(SCRIPTS / "train_paced.py")
PARTITION = 120.0
"""Seconds the link stays cut."""
TIMEOUT = 30
"""training.timeout: the collective timeout after which the ranks fail and are diagnosed."""
HELD = 6
"""The step after which both ranks wait for the test (the newest checkpoint is step 4's)."""
RETRANSMIT = 130.0
"""Seconds after the link returns for TCP to retransmit a request sent during the cut: the
kernel's largest retransmission interval (tcp_rto_max_ms, 120 s) plus slack."""
ARGS = [
    *BASE,
    "--set",
    "training.steps=10",
    "--set",
    f"training.timeout={TIMEOUT}",
    "--set",
    "schedule.decay=constant",
    "--set",
    "logging.every_steps=1",
]


def node(host: Host, master: Host, port: int, rank: int, run: Path, gate: Path) -> subprocess.Popen:
    """One node's launcher: static rendezvous at ``master``, one restart, training ``ARGS``."""
    cmd = [
        *LAUNCHER,
        *node_flags(host, master, port, rank),
        # The agents' store reads wait for the other node this long: longer than the cut
        # plus TCP's retransmission backoff, so that the job waits for the link, not fails.
        "--start_timeout=600",
        "--max_restarts=1",
        PACED,
        str(gate),
        *ARGS,
        "--set",
        f"run.dir={run}",
    ]
    log = run.parent / f"{host.hostname}.log"
    with open(log, "w") as out:
        proc = host.popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
    proc.log_path = log  # type: ignore[attr-defined]
    return proc


def output(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text()  # type: ignore[attr-defined]


def wait_until(check, what: str, timeout: float, *procs: subprocess.Popen) -> float:
    """Poll ``check()`` every 0.1 s; the monotonic time it first held. Fails on timeout or on
    a launcher that ended first (with every launcher's output)."""
    deadline = time.monotonic() + timeout
    while not check():
        ended = [p for p in procs if p.poll() is not None]
        if ended or time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.log_path.name}:\n{output(p)}" for p in procs)  # type: ignore[attr-defined]
            pytest.fail(f"no {what} within {timeout:.0f} s (ended: {[p.returncode for p in ended]})\n{logs}")
        time.sleep(0.1)
    return time.monotonic()


def starts(run: Path) -> list[str]:
    """Rank 0's ``world W, step S`` start lines, one per attempt."""
    log = run / "logs" / "rank_0.log"
    text = log.read_text() if log.exists() else ""
    return re.findall(r"start: (world \d+, step \d+)", text)


def last_step(run: Path) -> int:
    rows = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    found = [int(m.group(1)) for m in (re.search(r'"step": (\d+)', row) for row in rows) if m]
    return max(found, default=0)


@pytest.mark.timeout(720)
@pytest.mark.parametrize("cut", ["link", "drop"], ids=["link-down", "iptables-drop"])
def test_a_120s_partition_names_the_silent_rank_then_resumes_exactly_once_the_link_is_back(tmp_path, cut):
    reference = tmp_path / "reference"
    ref = cli("train", *ARGS, "--set", f"run.dir={reference}")
    assert ref.returncode == 0, ref.stderr
    run, gate = tmp_path / "run", tmp_path / "gate"
    gate.mkdir()
    (gate / f"hold_{HELD}").touch()
    with hosts(2) as (h0, h1):
        port = free_port()
        jobs = [node(h0, h0, port, 0, run, gate), node(h1, h0, port, 1, run, gate)]
        wait_until(lambda: last_step(run) >= HELD, f"step {HELD}", 180, *jobs)
        cut_at = time.monotonic()
        h1.link_down() if cut == "link" else h1.drop(True)
        (gate / f"hold_{HELD}").unlink()  # the ranks go on into step 7's collectives, and time out
        # The job names the silent rank and its host (heartbeat.py, read by rank 0 on the store's host).
        silent = re.compile(rf"did not arrive: rank 1 \([^)]*\) on {h1.hostname}")
        named_at = wait_until(lambda: silent.search(output(jobs[0])), "line naming rank 1 and its host", 90, *jobs)
        named_after = named_at - cut_at
        assert named_after <= TIMEOUT + 5, f"named after {named_after:.1f} s\n{output(jobs[0])}"
        time.sleep(max(0.0, cut_at + PARTITION - time.monotonic()))
        assert all(job.poll() is None for job in jobs), "a launcher gave up during the cut:\n" + output(jobs[1])
        h1.link_up() if cut == "link" else h1.drop(False)
        back_at = time.monotonic()
        for job in jobs:
            remaining = back_at + RETRANSMIT + 60 - time.monotonic()
            assert job.wait(timeout=max(1.0, remaining)) == 0, output(job)
        done_after = time.monotonic() - back_at
    assert starts(run) == ["world 2, step 0", "world 2, step 4"], starts(run)
    assert_params(final_params(run), final_params(reference), atol=1e-10)
    print(f"{cut}: rank 1 and {h1.hostname} named {named_after:.1f} s after the cut (timeout {TIMEOUT} s); ")
    print(f"{cut}: the job finished {done_after:.1f} s after the link returned")
