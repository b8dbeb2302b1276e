"""The lost-node watch on a c10d handler (launcher/lost_nodes.py), in-process on a stand-in handler.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_lost_nodes.py -q``
The handler stands in for torch's ``DynamicRendezvousHandler``: its state (participants,
keep-alives, closed) is set by the test as the store's syncs would leave it. The real thing,
a host lost on the namespace harness: test_netns_lost_host.py.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from neural_arch.distributed.launcher.lost_nodes import watch_lost_nodes


@dataclass(frozen=True)
class Node:
    addr: str
    pid: int


A, B, C = Node("10.0.0.1", 11), Node("10.0.0.2", 22), Node("10.0.0.3", 33)


@dataclass
class State:
    participants: dict = field(default_factory=dict)
    last_heartbeats: dict = field(default_factory=dict)
    closed: bool = False


class Handler:
    def __init__(self, min_nodes: int) -> None:
        self._state_holder = SimpleNamespace(state=State())
        self._settings = SimpleNamespace(
            keep_alive_interval=timedelta(seconds=5), keep_alive_max_attempt=3, min_nodes=min_nodes
        )
        self._this_node = A
        self.waiting = 0
        self.ages: dict[Node, float] = {}
        """Seconds since each node's newest keep-alive, at the time of the next round."""

    def next_rendezvous(self) -> str:
        now = datetime.now(timezone.utc)
        state = self._state_holder.state
        state.participants = {A: 0, B: 1, C: 2}
        state.last_heartbeats = {n: now - timedelta(seconds=self.ages.get(n, 0)) for n in (A, B, C)}
        return "info"

    def num_nodes_waiting(self) -> int:
        return self.waiting


def watched(min_nodes: int, **ages: float) -> tuple[Handler, io.StringIO]:
    """A watched handler in a round of A (this node), B and C; ``B=16``: B's keep-alive is 16 s old."""
    handler, out = Handler(min_nodes), io.StringIO()
    handler.ages = {globals()[name]: age for name, age in ages.items()}
    watch_lost_nodes(handler, nproc=2, out=out)
    assert handler.next_rendezvous() == "info"
    return handler, out


def test_a_member_silent_past_the_keep_alive_expiry_is_named_once_and_the_group_re_forms():
    handler, out = watched(min_nodes=1, B=16)
    assert handler.num_nodes_waiting() == 1  # the agent stops its workers and re-forms the group
    line = out.getvalue().strip()
    assert line.startswith("neural_arch launcher: node 1 at 10.0.0.2 (launcher pid 22, ranks 2-3) is lost: ")
    assert "no rendezvous keep-alive for 16 s; the group re-forms without it" in line
    del handler._state_holder.state.participants[B]  # torch's sanitize removed it; still lost, named once
    assert handler.num_nodes_waiting() == 0 and out.getvalue().count("\n") == 1


def test_below_the_minimum_the_line_says_the_job_waits_and_nothing_restarts():
    handler, out = watched(min_nodes=3, C=20)
    assert handler.num_nodes_waiting() == 0
    assert "node 2 at 10.0.0.3 (launcher pid 33, ranks 4-5) is lost" in out.getvalue()
    assert "the job needs 3 node(s) (--nnodes) and waits for it to come back." in out.getvalue()


@pytest.mark.parametrize("how", ["left", "closed"])
def test_a_member_that_left_alive_or_a_closed_rendezvous_names_nobody(how):
    handler, out = watched(min_nodes=1, B=14)  # 1 s before its expiry
    state = handler._state_holder.state
    if how == "left":  # its launcher restarts after a failure: it leaves the round with a fresh keep-alive
        del state.participants[B], state.last_heartbeats[B]
        assert handler.num_nodes_waiting() == 0
    else:
        state.closed = True
    handler._settings.keep_alive_max_attempt = 2  # as if 5 s went by: its keep-alive is past the expiry now
    assert handler.num_nodes_waiting() == 0 and out.getvalue() == ""
