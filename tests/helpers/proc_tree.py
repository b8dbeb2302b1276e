"""What a running job looks like from /proc: its process tree, listening sockets, survivors.

Use (Linux): ``from tests.helpers.proc_tree import alive, listening, process_tree``;
``tree = process_tree(launcher.pid)``; ``listening(tree)`` -> ``[(pid, "127.0.0.1", 40123), ...]``;
``alive(pids)`` -> the pids still running (zombies do not count). Shared by the launcher and
trainer tests; reads only /proc, so it sees exactly what the kernel sees. The process tree
and ``alive`` are benchmarks/common/proc_tree.py's.
"""

from __future__ import annotations

import ipaddress
import os

from benchmarks.common.proc_tree import PROC, alive, process_tree  # one copy: the soak uses it too

__all__ = ["alive", "is_loopback", "listening", "process_tree"]

TCP_LISTEN = "0A"
"""The ``st`` column of /proc/net/tcp{,6} for a listening socket."""


def _socket_inodes(pid: int) -> set[str]:
    fd_dir = PROC / str(pid) / "fd"
    inodes = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(hex_addr: str) -> str:
    """/proc/net/tcp's little-endian hex address -> text (``0100007F`` -> ``127.0.0.1``)."""
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))  # four host-order 32-bit words
    address = ipaddress.IPv6Address(words)
    return str(address.ipv4_mapped or address)


def _listening_by_inode() -> dict[str, tuple[str, int]]:
    found = {}
    for table in ("tcp", "tcp6"):
        path = PROC / "net" / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) > 9 and cols[3] == TCP_LISTEN:
                addr, port = cols[1].rsplit(":", 1)
                found[cols[9]] = (_address(addr), int(port, 16))
    return found


def listening(pids: set[int]) -> list[tuple[int, str, int]]:
    """Every listening TCP socket the ``pids`` hold open: (pid, address, port), sorted."""
    table = _listening_by_inode()
    return sorted((pid, *table[inode]) for pid in pids for inode in _socket_inodes(pid) if inode in table)


def is_loopback(address: str) -> bool:
    """Whether ``address`` is reachable from this machine only (127.0.0.0/8, ::1)."""
    return ipaddress.ip_address(address).is_loopback
