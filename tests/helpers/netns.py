"""Several hosts on one machine: network namespaces joined by veth to a bridge, for multi-host tests.

Use::

    reason = netns_unavailable()          # None, or why these tests must skip (no root, no ip, ...)
    with hosts(2) as (h0, h1):            # h0.addr == "10.213.7.1", h1.addr == "10.213.7.2"
        proc = h1.popen([sys.executable, ...], env=...)   # runs inside h1, host name h1.hostname
        h1.link_down(); h1.link_up()      # a partition by link state
        h1.drop(True); h1.drop(False)     # a partition by iptables DROP on its veth
        h1.loss(0.05)                     # 5 % of its incoming packets dropped (iptables statistic)
        listening_in(h0)                  # [(pid, "10.213.7.1", 29500), ...]: its listening sockets (ss)
        gate_asks_for_token(h0, h0.addr, 29500)  # whether that port opens with the job token's challenge
        [*LAUNCHER, *node_flags(h1, h0, port, 1), script]   # node 1 of a 2-node job hosted at h0

Each host is a namespace of its own with loopback up (each host's own stores and forwarders
listen there) and one veth ``eth0`` with a private 10.x address; the peer ends sit in a
switch namespace's bridge. Nothing is added to the machine's own namespace, so test traffic
stays among the namespaces made here; everything is deleted when the ``with`` block ends,
whatever happened (processes still running in them are killed first). This kernel has no
netem: loss and partitions are iptables rules and link states. Programs run with their own
UTS namespace (``unshare --uts``) so that each host has its own host name, and with
``GLOO_SOCKET_IFNAME=eth0`` so that gloo binds the veth, not what the shared host name resolves to.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Sequence

IFNAME = "eth0"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


def netns_unavailable() -> Optional[str]:
    """Why namespaces cannot be made here (for ``pytest.skip``), or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the suite as root, as .ci/run does)"
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"no `{tool}` on this machine (Debian package {package}; .ci/run installs it)"
    probe = f"na-probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "iptables", "-S")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"cannot make a network namespace with iptables here: {detail.strip()[:200]}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Host:
    """One host: a namespace with ``eth0`` at ``addr``."""

    netns: str
    hostname: str
    addr: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host, under its own host name."""
        script = 'hostname "$0" && exec "$@"'  # $0: the host name; then the program and its arguments
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "sh", "-c", script, self.hostname, *argv]

    def popen(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None, **kwargs) -> subprocess.Popen:
        """Start ``argv`` inside this host (killed when the hosts go away)."""
        cmd = self.command(argv)
        full = dict(os.environ, GLOO_SOCKET_IFNAME=IFNAME, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env or {}))
        proc = subprocess.Popen(cmd, env=full, start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def ip(self, *args: str) -> None:
        _run("ip", "-n", self.netns, *args)

    def iptables(self, *args: str) -> None:
        _run("ip", "netns", "exec", self.netns, "iptables", *args)

    def link_down(self) -> None:
        self.ip("link", "set", IFNAME, "down")

    def link_up(self) -> None:
        self.ip("link", "set", IFNAME, "up")

    def drop(self, on: bool) -> None:
        """Drop every packet in and out of ``eth0`` (on) or stop doing so (off)."""
        flag = "-I" if on else "-D"
        self.iptables(flag, "INPUT", "-i", IFNAME, "-j", "DROP")
        self.iptables(flag, "OUTPUT", "-o", IFNAME, "-j", "DROP")

    def tcp_rto_max(self, seconds: int) -> int:
        """Cap TCP's retransmission interval in this host at ``seconds`` for the sockets opened
        from now on (``net.ipv4.tcp_rto_max_ms``, per namespace, Linux 6.15+); the cap in effect:
        ``seconds``, or the kernel's fixed 120 s where it has no such setting."""
        if not os.path.exists("/proc/sys/net/ipv4/tcp_rto_max_ms"):
            return 120
        write = f"echo {seconds * 1000} > /proc/sys/net/ipv4/tcp_rto_max_ms"  # sh, not sysctl: procps may be absent
        _run("ip", "netns", "exec", self.netns, "sh", "-c", write)
        return seconds

    def loss(self, probability: float) -> None:
        """Drop that fraction of the packets arriving on ``eth0``, at random."""
        self.iptables(
            "-A", "INPUT", "-i", IFNAME, "-m", "statistic", "--mode", "random",
            "--probability", str(probability), "-j", "DROP",
        )  # fmt: skip

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its workers: one session
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)


def listening_in(host: Host) -> list[tuple[int, str, int]]:
    """Every listening TCP socket in ``host``'s namespace: (pid, address, port), as ``ss -ltnp`` lists them."""
    table = subprocess.run(
        ["ip", "netns", "exec", host.netns, "ss", "-Hltnp"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    found = []
    for line in table.splitlines():
        addr, _, port = line.split()[3].rpartition(":")
        found += [(int(pid), addr.strip("[]"), int(port)) for pid in re.findall(r"pid=(\d+)", line)]
    return found


def gate_asks_for_token(client: Host, addr: str, port: int) -> bool:
    """Whether what listens at ``addr:port``, connected to from inside ``client``, opens with the
    job token's challenge (launcher/gate.py)."""
    probe = (
        "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); "
        "print(s.recv(64)[:24].decode(errors='replace'))"
    )
    got = subprocess.run(
        ["ip", "netns", "exec", client.netns, sys.executable, "-c", probe, addr, str(port)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return got.stdout.startswith("neural_arch job token")


def node_flags(host: Host, master: Host, port: int, rank: int) -> list[str]:
    """The launcher flags of node ``rank`` (one worker, on ``host``) of a 2-node job hosted at ``master``."""
    return [
        "--nproc_per_node=1",
        "--nnodes=2",
        f"--node_rank={rank}",
        f"--master_addr={master.addr}",
        f"--master_port={port}",
        f"--local_addr={host.addr}",
    ]


@contextmanager
def hosts(count: int) -> Iterator[list[Host]]:
    """``count`` (2-3) hosts on one bridge, deleted afterwards."""
    tag = f"{os.getpid() % 10000}{random.randrange(100):02d}"
    subnet = f"10.{200 + random.randrange(50)}.{random.randrange(1, 255)}"
    switch = f"na{tag}sw"
    made: list[str] = []
    members: list[Host] = []
    try:
        _run("ip", "netns", "add", switch)
        made.append(switch)
        _run("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", switch, "link", "set", "br0", "up")
        for i in range(count):
            host = Host(f"na{tag}h{i}", f"nahost{i}", f"{subnet}.{i + 1}")
            _run("ip", "netns", "add", host.netns)
            made.append(host.netns)
            port = f"p{tag}h{i}"
            _run("ip", "link", "add", port, "type", "veth", "peer", "name", IFNAME, "netns", host.netns)
            _run("ip", "link", "set", port, "netns", switch)
            _run("ip", "-n", switch, "link", "set", port, "master", "br0", "up")
            host.ip("addr", "add", f"{host.addr}/24", "dev", IFNAME)
            host.ip("link", "set", IFNAME, "up")
            host.ip("link", "set", "lo", "up")
            members.append(host)
        yield members
    finally:
        for host in members:
            host.kill_all()
        for name in reversed(made):  # deleting a namespace deletes its veth ends
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        for i in range(count):  # a veth end left in this namespace by a set-up that failed half-way
            subprocess.run(["ip", "link", "del", f"p{tag}h{i}"], capture_output=True)
