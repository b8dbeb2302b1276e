"""A free TCP port for a rendezvous: ``free_port()``.

Try it: ``python -c "from neural_arch.utils.ports import free_port; print(free_port())"``

Why only for tests, benchmarks and tools: the port is free when this returns, but another
process may take it before the caller binds it. The launcher itself avoids that race by
letting the rendezvous store bind port 0 (see ``distributed/launcher/launch.py``).
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]
