"""Two hosts in network namespaces (tests/helpers/netns.py): a node without the job token is
refused on the host's side in one line naming its address, a node with it joins, and the
host's job listens only where it should.

Run (as root): ``.venv/bin/python -m pytest tests/distributed/launcher/test_netns_token.py -q``
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.multiproc import free_port
from tests.helpers.netns import Host, gate_asks_for_token, hosts, listening_in, netns_unavailable, node_flags
from tests.helpers.paths import SCRIPTS
from tests.helpers.proc_tree import process_tree

pytestmark = [
    pytest.mark.machine,  # network namespaces: one multi-host test at a time
    pytest.mark.multiprocess,
    pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable())),
]

PROBE = str(SCRIPTS / "launch_probe.py")
LAUNCHER = [sys.executable, "-m", "neural_arch.distributed.launcher"]


def launcher(host: Host, master: Host, port: int, rank: int, out: Path, *extra: str, env=None) -> subprocess.Popen:
    cmd = [
        *LAUNCHER,
        *node_flags(host, master, port, rank),
        "--start_timeout=60",
        *extra,
        PROBE,
        str(out),
        "ok",
    ]
    path = out / f"{host.hostname}-{len(host.procs)}.txt"
    with open(path, "w") as log:
        proc = host.popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log_path = path  # type: ignore[attr-defined]
    return proc


def output(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text()  # type: ignore[attr-defined]


def wait_for(predicate, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"ended before {what}: {output(proc)}"
        assert time.monotonic() < deadline, f"no {what} in {timeout} s: {output(proc)}"
        time.sleep(0.2)


RENDEZVOUS = {
    "static": [],
    "c10d": ["--rdzv_backend=c10d"],
    "c10d-rdzv-id": ["--rdzv_backend=c10d", "--rdzv_id=job-7"],
}


@pytest.mark.timeout(420)
@pytest.mark.parametrize("rdzv", list(RENDEZVOUS), ids=list(RENDEZVOUS))
def test_a_tokenless_node_is_refused_by_the_host_and_a_node_with_the_token_joins(tmp_path, rdzv):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    token_file.chmod(0o600)
    extra = RENDEZVOUS[rdzv]
    with hosts(2) as (h0, h1):
        port = free_port()
        host_extra = [*extra, f"--job-token-file={token_file}"] + (["--rdzv_conf=is_host=1"] if "c10d" in rdzv else [])
        first = launcher(h0, h0, port, 0, tmp_path, *host_extra)
        # Probes come from the host itself, so that every refusal naming h1 is the intruder's.
        wait_for(lambda: gate_asks_for_token(h0, h0.addr, port), first, 60, "gate on the host")
        # The intruder: a launcher with no token at all (nothing in its command line or environment).
        gives_up = ["--start_timeout=15"] + (["--rdzv_conf=read_timeout=15"] if "c10d" in rdzv else [])
        intruder = launcher(h1, h0, port, 1, tmp_path, *extra, *gives_up)
        assert intruder.wait(timeout=240) != 0, output(intruder)
        assert not list(tmp_path.glob("rank_*.json")), "the intruder's worker ran"
        refused = [line for line in output(first).splitlines() if f"refused a node at {h1.addr} " in line]
        assert len(refused) == 1, output(first)
        assert f"refused a node at {h1.addr} (port {port}):" in refused[0] and "it gets no rank" in refused[0]
        # The host's launcher listens only on its own address and loopback; what it exposes
        # beyond loopback opens with the token handshake (a running job's sockets, workers and
        # all, are checked in test_netns_partition.py).
        tree = process_tree(first.pid)
        sockets = [s for s in listening_in(h0) if s[0] in tree]
        assert not [s for s in sockets if s[1] in ("0.0.0.0", "*", "[::]", "::")], sockets
        public = [(pid, addr, p) for pid, addr, p in sockets if addr == h0.addr and pid in _launchers(tree)]
        assert public and all(gate_asks_for_token(h0, addr, p) for _, addr, p in public), sockets
        # A node with the token (from the environment this time) joins, and the job runs.
        second = launcher(h1, h0, port, 1, tmp_path, *extra, env={"NEURAL_ARCH_JOB_TOKEN": "s3cret-token"})
        assert second.wait(timeout=240) == 0, output(second)
        assert first.wait(timeout=60) == 0, output(first)
        seen = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank_*.json"))]
        assert len(seen) == 2, seen
        print(f"{rdzv}: refused in one line on the host: {refused[0]}")


def _launchers(tree: set[int]) -> set[int]:
    """The launcher processes of a tree (not its workers, whose gloo sockets are not gated)."""
    found = set()
    for pid in tree:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"neural_arch.distributed.launcher\0" in cmdline:
            found.add(pid)
    return found
