"""Job tokens: where they come from, and the host's check on every connection (job_token.py,
gate.py). In-process on loopback, no ranks; the multi-host versions are in test_netns_token.py.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_job_token.py -q``
"""

from __future__ import annotations

import hashlib
import inspect
import os
import socket
import stat
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

import neural_arch
from neural_arch.distributed.env import ClusterEnv
from neural_arch.distributed.launcher.gate import Forwarder, Gate
from neural_arch.distributed.launcher.job_token import (
    TOKEN_ENV,
    ForeignJobError,
    JobToken,
    challenge,
    resolve_job_token,
    respond,
)
from neural_arch.distributed.launcher.keeper import node_keeper
from neural_arch.distributed.launcher.listen import LOOPBACK, client_store, serving_store
from tests.helpers.proc_tree import listening

TIMEOUT = timedelta(seconds=10)
TOKEN = JobToken("job-a", "--job-token")


def test_token_sources_in_order(tmp_path):
    slurm = ClusterEnv(source="slurm", rank=0, world_size=2, job_id="4242")
    torchrun = ClusterEnv(source="torchrun", rank=0, world_size=2, job_id="na-x")
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    env = {TOKEN_ENV: "from-env"}
    assert resolve_job_token("t", str(secret), "run", slurm, env) == JobToken("t", "--job-token")
    assert resolve_job_token(None, str(secret), "run", slurm, env) == JobToken(
        "from-file", f"--job-token-file {secret}"
    )
    assert resolve_job_token(None, None, "run", slurm, env) == JobToken("from-env", TOKEN_ENV)
    assert resolve_job_token(None, None, "run", slurm, {}) == JobToken("run", "--rdzv-id")
    assert resolve_job_token(None, None, None, slurm, {}) == JobToken("4242", "the slurm job id")
    assert resolve_job_token(None, None, None, torchrun, {}) is None  # an enclosing launcher's id tells no jobs apart
    assert resolve_job_token(None, None, None, None, {}) is None


@pytest.mark.parametrize("content", [None, "", "\n\n"], ids=["missing", "empty", "blank"])
def test_an_unusable_token_file_is_one_line(tmp_path, content):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError) as refused:
        resolve_job_token(None, str(path), None, None, {})
    assert "\n" not in str(refused.value) and str(path) in str(refused.value)


class _Recording:
    """A socket for ``respond`` that keeps what it sends."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.sent = sock, b""

    def recv(self, size: int) -> bytes:
        return self.sock.recv(size)

    def sendall(self, data: bytes) -> None:
        self.sent += data
        self.sock.sendall(data)


def _handshake(host_token: JobToken, node_reply: bytes | JobToken) -> tuple[str | None, bytes]:
    """Run the host's half against a node that answers with ``node_reply`` (a token's proof, or
    fixed bytes); the host's verdict and what the node sent."""
    host, node = socket.socketpair()
    host.settimeout(5)
    node.settimeout(5)
    verdict: list = []

    def host_side() -> None:
        verdict.append(challenge(host, host_token))
        host.shutdown(socket.SHUT_WR)  # as the gate closes a refused connection

    thread = threading.Thread(target=host_side)
    thread.start()
    recording = _Recording(node)
    if isinstance(node_reply, JobToken):
        try:
            respond(recording, node_reply, "host:1")  # type: ignore[arg-type]
        except ForeignJobError:
            pass
    else:
        node.recv(1024)
        recording.sendall(node_reply)
        node.shutdown(socket.SHUT_WR)  # all it will say: the host need not wait for more
    thread.join()
    host.close()
    node.close()
    return verdict[0], recording.sent


def test_the_host_accepts_a_proof_of_its_token_but_not_another_token_nor_a_replayed_proof():
    verdict, proof = _handshake(TOKEN, TOKEN)
    assert verdict is None and len(proof) == 64 and b"job-a" not in proof
    assert "wrong" in _handshake(TOKEN, JobToken("job-b", "--job-token"))[0]
    # A recorded proof answers an old nonce: the next connection's nonce differs.
    assert "wrong" in _handshake(TOKEN, proof)[0]
    assert "no proof" in _handshake(TOKEN, b"\x00\x01")[0]


def _store_behind_gate() -> tuple[dist.TCPStore, Gate]:
    store = serving_store(LOOPBACK, 0, TIMEOUT)
    return store, Gate(LOOPBACK, 0, store.port, TOKEN)


def test_a_node_with_the_token_reaches_the_store_through_its_forwarder():
    store, gate = _store_behind_gate()
    forwarder = Forwarder(LOOPBACK, gate.port, TOKEN, deadline_s=5)
    try:
        client = client_store(LOOPBACK, forwarder.port, TIMEOUT)
        client.set("from-node", "1")
        assert store.get("from-node") == b"1"
        ports = {(addr, port) for _, addr, port in listening({os.getpid()})}
        assert (LOOPBACK, store.port) in ports and (LOOPBACK, gate.port) in ports
    finally:
        forwarder.close()
        gate.close()


@pytest.mark.timeout(60)
def test_a_tokenless_store_client_is_refused_by_the_host_in_one_line_naming_its_address(capfd):
    store, gate = _store_behind_gate()
    try:
        with pytest.raises((RuntimeError, OSError)):  # torch's DistNetworkError/DistStoreError
            dist.TCPStore(LOOPBACK, gate.port, None, False, timedelta(seconds=3))
        assert store.num_keys() <= 1  # nothing but the server's own key: the client never reached it
    finally:
        gate.close()
    lines = [line for line in capfd.readouterr().err.splitlines() if "refused a node" in line]
    assert len(lines) == 1, lines
    assert f"refused a node at {LOOPBACK} (port {gate.port}): it sent no proof of the job token" in lines[0]


def test_a_node_with_another_token_is_refused_on_both_sides(capfd):
    store, gate = _store_behind_gate()
    try:
        with pytest.raises(ForeignJobError) as refused:
            Forwarder(LOOPBACK, gate.port, JobToken("job-b", "--job-token-file /t"), deadline_s=5)
        assert "\n" not in str(refused.value) and "--job-token-file /t" in str(refused.value)
    finally:
        gate.close()
    err = capfd.readouterr().err
    assert f"refused a node at {LOOPBACK} (port {gate.port}): its proof of the job token is wrong" in err


def test_a_node_with_a_token_refuses_a_host_without_one():
    store = serving_store(LOOPBACK, 0, TIMEOUT)  # a plain store: no gate asks for the token
    with pytest.raises(ForeignJobError) as refused:
        Forwarder(LOOPBACK, store.port, TOKEN, deadline_s=5)
    assert "asks for no job token" in str(refused.value)


def test_the_token_never_crosses_the_network_and_only_the_hmac_reads_it():
    # docs/security.md: "The token never crosses the network and is stored nowhere (no store
    # key holds it or a digest of it)": all a node sends is nonces and an HMAC of them, and the
    # token's text is read in one place, the HMAC's key (so no code can write it to a store).
    verdict, sent = _handshake(TOKEN, TOKEN)
    assert verdict is None
    digest = hashlib.sha256(b"job-a")
    assert not [s for s in (b"job-a", digest.digest(), digest.hexdigest().encode()) if s in sent]
    package = Path(neural_arch.__file__).parent
    readers = [
        f"{path.relative_to(package)}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        for line in path.read_text().splitlines()
        if ".value" in line and "token" in line
    ]
    assert readers == [
        # the snapshot keeper's own random token (launcher/keeper.py makes it; never the job's) in its 0600
        # file (the workers also tell each other their keepers' addresses, tokens included: snapshot_ring.py)
        "distributed/checkpoint/keeper_file.py: "
        'found = {"host": address.host, "port": address.port, "token": address.token.value, "reach": address.reach}',
        "distributed/launcher/job_token.py: "
        "return hmac.new(token.value.encode(), role + host_nonce + node_nonce, hashlib.sha256).digest()",
    ]
    # ... and the launcher gives the keeper no job token to write there: node_keeper takes none.
    assert "token" not in inspect.signature(node_keeper).parameters


def test_a_command_line_is_readable_by_every_user_and_the_environment_by_its_owner_only():
    # Why docs/security.md keeps the token out of the command line: --job-token shows in
    # /proc/PID/cmdline to every user; NEURAL_ARCH_JOB_TOKEN sits in /proc/PID/environ (0400).
    proc = Path(f"/proc/{os.getpid()}")
    assert stat.S_IMODE((proc / "cmdline").stat().st_mode) == 0o444
    assert stat.S_IMODE((proc / "environ").stat().st_mode) == 0o400
