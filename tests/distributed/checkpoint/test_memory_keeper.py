"""SnapshotKeeper (memory_keeper.py) over real sockets: what it holds, serves, refuses.

Run: ``.venv/bin/python -m pytest tests/distributed/checkpoint/test_memory_keeper.py -q`` (one
process, a keeper thread on 127.0.0.1; under 2 s).
"""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

from neural_arch.distributed.checkpoint.keeper_file import keeper_address, write_keeper_file
from neural_arch.distributed.checkpoint.keeper_protocol import (
    CHUNK,
    HeldStep,
    KeeperAddress,
    KeeperClient,
    KeeperError,
    send_line,
)
from neural_arch.distributed.checkpoint.memory_keeper import SnapshotKeeper
from neural_arch.distributed.launcher.job_token import JobToken, respond

TOKEN = JobToken("job-a", "the test")


@pytest.fixture
def keeper():
    with SnapshotKeeper(TOKEN, capacity=3 * CHUNK) as k:
        yield k


def frames_of(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def test_a_step_is_served_once_every_part_arrived(keeper):
    client = KeeperClient(keeper.address)
    big = bytes(range(256)) * (CHUNK // 256) + b"tail"  # two frames
    client.put(4, 1, 2, frames_of(b"part one"))
    assert client.newest() is None  # part 0 missing: nothing complete
    with pytest.raises(KeeperError, match="not held complete"):
        client.get(4, 1)
    client.put(4, 0, 2, frames_of(big))
    assert client.newest() == keeper.newest == 4
    assert client.get(4, 0) == big and client.get(4, 1) == b"part one"
    assert keeper.held_bytes == len(big) + len(b"part one")


def test_a_newer_complete_step_replaces_the_old_and_stale_pushes_are_refused(keeper):
    client = KeeperClient(keeper.address)
    client.put(3, 0, 1, [b"three"])
    client.put(9, 0, 2, [b"nine, of an attempt that died"])  # pending, never completed
    client.put(6, 0, 1, [b"six"])  # drops the pending step 9: a step's parts come from one attempt
    assert client.newest() == 6 and client.get(6, 0) == b"six" and keeper.held_bytes == 3
    with pytest.raises(KeeperError, match="step 3 is not newer than the complete step 6"):
        client.put(3, 0, 1, [b"again"])
    with pytest.raises(KeeperError, match="part 2 of 2"):
        client.put(12, 2, 2, [b"x"])


def test_a_push_over_capacity_is_refused_and_the_complete_step_stays(keeper):
    client = KeeperClient(keeper.address)
    client.put(3, 0, 1, [b"3" * CHUNK])
    with pytest.raises(KeeperError, match=f"exceed the keeper's capacity of {3 * CHUNK} bytes"):
        client.put(6, 0, 1, [b"6" * CHUNK] * 3)
    assert client.newest() == 3 and client.get(3, 0) == b"3" * CHUNK
    assert keeper.held_bytes == CHUNK  # the refused push's frames were dropped as they came
    client.put(6, 0, 1, [b"6" * CHUNK] * 2)  # fits beside step 3 while it arrives
    assert client.newest() == 6 and keeper.held_bytes == 2 * CHUNK


def test_another_jobs_token_gets_nothing(keeper):
    KeeperClient(keeper.address).put(3, 0, 1, [b"secret state"])
    other = KeeperClient(KeeperAddress(keeper.address.host, keeper.address.port, JobToken("job-b", "the test")))
    with pytest.raises(KeeperError, match="belongs to another job"):
        other.get(3, 0)
    with pytest.raises(KeeperError, match="belongs to another job"):
        other.put(6, 0, 1, [b"forged"])
    assert keeper.newest == 3


def test_a_peer_that_sends_garbage_is_dropped_and_the_keeper_serves_on(keeper):
    with socket.create_connection((keeper.address.host, keeper.address.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n" * 10)
        sock.recv(4096)  # the handshake's hello; our answer is no proof
    client = KeeperClient(keeper.address)
    client.put(3, 0, 1, [b"ok"])
    assert client.get(3, 0) == b"ok"


def test_an_unreachable_keeper_is_one_line():
    with SnapshotKeeper(TOKEN, capacity=1) as gone:
        address = gone.address
    with pytest.raises(KeeperError, match=f"cannot reach the snapshot keeper at {address.where}"):
        KeeperClient(address).newest()


def test_a_worker_finds_the_keeper_by_the_file_in_its_folder(keeper, tmp_path, monkeypatch):
    folder = tmp_path / "attempt_0" / "1"
    path = write_keeper_file(folder, keeper.address)
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the job token
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(folder / "error.json"))
    found = keeper_address()
    assert found is not None and (found.host, found.port) == (keeper.address.host, keeper.address.port)
    KeeperClient(found).put(3, 0, 1, [b"found"])  # its token is the keeper's
    assert keeper.newest == 3
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "elsewhere" / "error.json"))
    assert keeper_address() is None  # a worker of another launcher: no file, no snapshots


def test_a_worker_opens_the_keepers_own_sealed_file_which_outlives_the_step(keeper):
    client = KeeperClient(keeper.address)
    client.put(3, 0, 1, frames_of(b"three" * 1000))
    fd = client.open(3, 0)
    try:
        assert os.pread(fd, 10, 0) == b"threethree"
        writer = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
        with pytest.raises(PermissionError):  # sealed: nobody writes the keeper's copy, not even through /proc
            os.write(writer, b"changed")
        os.close(writer)
        client.put(6, 0, 1, [b"six"])  # replaces step 3: the keeper lets its file go, the worker's stays
        assert os.pread(fd, 5, 4995) == b"three"
        # the opened step is still mapped by the workers that restored from it: counted until they end
        assert keeper.held_bytes == 3 + 5000
    finally:
        os.close(fd)
    with pytest.raises(KeeperError, match="step 3 part 0 is not held complete"):
        client.open(3, 0)


def test_a_keeper_that_holds_some_parts_completes_with_them_and_says_which(keeper):
    """A node's keeper in a multi-node job holds its own ranks' parts and the previous node's
    (``holds``): the step is complete when those arrived, and ``held`` says which they are. A
    push of the same step in another shape (an attempt at another world size) drops the pending
    parts of the old one; a hostile part count is refused without building anything of its size."""
    client = KeeperClient(keeper.address)
    with pytest.raises(KeeperError, match=r"part 2 is not among the parts \[0, 1\]"):
        client.put(4, 2, 4, [b"two"], holds=[0, 1])
    client.put(4, 3, 4, [b"three, of an attempt that died"], holds=[1, 3])
    client.put(4, 1, 4, [b"one"], holds=[0, 1])  # another shape: replaces the pending step 4
    assert client.held() is None
    client.put(4, 0, 4, [b"zero"], holds=[0, 1])
    held = client.held()
    assert held == HeldStep(4, 4, (0, 1)) and held.has(4, 1, 4)
    assert not held.has(4, 2, 4) and not held.has(3, 1, 4) and not held.has(4, 1, 2)  # 2 parts: another snapshot
    assert client.newest() == 4 and client.get(4, 1) == b"one" and keeper.held_bytes == len(b"onezero")
    with socket.create_connection((keeper.address.host, keeper.address.port), timeout=5) as sock:
        respond(sock, TOKEN, keeper.address.where)
        send_line(sock, {"op": "put", "step": 9, "part": 0, "parts": 10**12})
        assert sock.recv(100) == b""  # dropped at once
    assert client.newest() == 4


def _own_address() -> str:
    """This machine's address on its default route (a UDP connect sends nothing), or skip."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
            found = probe.getsockname()[0]
        except OSError:
            found = "127.0.0.1"
    if found.startswith("127."):
        pytest.skip("no non-loopback IPv4 address on this machine")
    return found


def test_a_keeper_other_nodes_reach_listens_beyond_loopback(tmp_path, monkeypatch):
    """``reach`` (a multi-node job): the keeper listens on that address alone (here this
    machine's own non-loopback one), every node's workers use it, and the keeper file carries it;
    an address that is not this machine's cannot be listened on (OSError: the launcher then
    keeps the keeper on loopback, with a note)."""
    reach = _own_address()
    with SnapshotKeeper(TOKEN, capacity=CHUNK, reach=reach) as keeper:
        address = keeper.address
        assert (address.host, address.reach, address.local_only) == (reach, reach, False)
        KeeperClient(address).put(3, 0, 1, [b"here"])
        assert KeeperClient(address).get(3, 0) == b"here"
        with pytest.raises(KeeperError, match="cannot reach"):  # not on loopback, not on every interface
            KeeperClient(KeeperAddress("127.0.0.1", address.port, TOKEN)).newest()
        folder = tmp_path / "attempt_0" / "0"
        write_keeper_file(folder, address)
        monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(folder / "error.json"))
        found = keeper_address()
        assert found is not None and (found.host, found.port, found.reach) == (reach, address.port, reach)
        assert found.token.value == TOKEN.value
    with pytest.raises(OSError):
        SnapshotKeeper(TOKEN, capacity=CHUNK, reach="192.0.2.254")  # TEST-NET-1: never this machine's
    with SnapshotKeeper(TOKEN, capacity=CHUNK, reach="localhost") as keeper:  # a name for loopback
        assert keeper.address.local_only and ipaddress.ip_address(keeper.address.host).is_loopback
