"""Stores listen on the address asked for and a second agent joins the first one's store
(listen.py); job tokens are tested in test_job_token.py. In-process, no ranks.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_listen.py -q``
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import pytest
import torch.distributed as dist

from neural_arch.distributed.launcher import DistributedLauncher, LaunchConfig
from neural_arch.distributed.launcher.listen import (
    LOOPBACK,
    _listener_or_wildcard,
    loopback_interface,
    rendezvous_store,
    serving_store,
)
from tests.helpers.proc_tree import listening

TIMEOUT = timedelta(seconds=10)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        pytest.param("::1", marks=pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")),
    ],
)
def test_a_served_store_listens_on_its_host_address_only(host):
    store = serving_store(host, 0, TIMEOUT)
    mine = [(addr, port) for _, addr, port in listening({os.getpid()}) if port == store.port]
    assert mine == [(host, store.port)]  # torch alone would list ("::", port): every interface
    client = dist.TCPStore(host, store.port, None, False, TIMEOUT)
    client.set("k", "v")
    assert store.get("k") == b"v"


def test_a_second_agent_on_the_machine_joins_the_first_ones_rendezvous_store():
    host = rendezvous_store("127.0.0.1", 0, TIMEOUT, is_host=None)
    joined = rendezvous_store("127.0.0.1", host.port, TIMEOUT, is_host=None)  # port taken: a client
    joined.set("from-joiner", "1")
    assert host.get("from-joiner") == b"1"
    assert [port for _, _, port in listening({os.getpid()})].count(host.port) == 1


def test_one_node_workers_are_told_to_use_loopback_unless_the_user_chose(monkeypatch):
    # This machine's host name resolves to 127.0.0.1, so gloo would pick loopback here anyway
    # (test_exposure cannot tell); on a usual machine it binds the host's LAN address.
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib0")
    one_node = DistributedLauncher(LaunchConfig(nproc_per_node=2))._worker_environment()
    assert one_node["GLOO_SOCKET_IFNAME"] == loopback_interface() == "lo"
    assert one_node["NCCL_SOCKET_IFNAME"] == "ib0"  # the user's choice stands
    two_nodes = DistributedLauncher(LaunchConfig(nnodes=2, master_port=29400))._worker_environment()
    assert "GLOO_SOCKET_IFNAME" not in two_nodes and "NCCL_SOCKET_IFNAME" not in two_nodes


def test_torch_alone_listens_on_every_interface_whatever_host_it_is_given():
    # Why listen.py binds the socket itself (docs/security.md, "One node").
    store = dist.TCPStore(LOOPBACK, 0, None, True, TIMEOUT, wait_for_workers=False)
    assert [addr for _, addr, port in listening({os.getpid()}) if port == store.port] in (["::"], ["0.0.0.0"])


def test_a_store_address_that_is_not_this_machines_falls_back_to_every_interface_with_one_note(capfd):
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: bind fails at once, nothing is sent.
    assert _listener_or_wildcard("192.0.2.1", 0) is None
    lines = capfd.readouterr().err.strip().splitlines()
    assert lines == [
        "launcher: note: 192.0.2.1 is not an address of this machine, so the store on port (free) listens on all "
        "interfaces; pass --master-addr/--local-addr naming this machine to avoid that."
    ]


def test_a_one_node_job_has_no_token_so_its_loopback_stores_admit_any_local_client():
    # docs/security.md: "Loopback still admits every local user of the machine, and the stores
    # have no authentication". A job token is for nodes joining; one node checks none.
    assert DistributedLauncher(LaunchConfig(nproc_per_node=2, job_token="secret"))._job_token() is None
    store = serving_store(LOOPBACK, 0, TIMEOUT)
    stranger = dist.TCPStore(LOOPBACK, store.port, None, False, TIMEOUT)  # any process of any user
    store.set("rendezvous-key", "job's")
    assert stranger.get("rendezvous-key") == b"job's"
    stranger.set("rendezvous-key", "rewritten")
    assert store.get("rendezvous-key") == b"rewritten"
