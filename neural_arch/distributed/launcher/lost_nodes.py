"""Name a node of the running c10d round whose keep-alive stopped, and let the survivors go on.

Used by ``rendezvous.rendezvous_handler`` on every c10d handler (not run by hand)::

    watch_lost_nodes(handler, nproc=2)   # wraps handler.next_rendezvous and num_nodes_waiting

Why: a host that vanishes (its link down, its launcher and ranks gone) makes its peers' ranks
wait in their next collective until ``training.timeout`` (600 s by default) expires, and
only then is it named. Its launcher's rendezvous keep-alive stops as well, and the other
launchers see that after ``keep_alive_interval x keep_alive_max_attempt`` (torch's 5 s x 3).
The agent asks ``num_nodes_waiting()`` every monitor interval while its workers are healthy;
this wrapper then also looks at the round's members. A member whose newest keep-alive is
older than that is *lost*: one line names it (its rendezvous address, node rank and ranks)
and, when the rest still make ``--nnodes``'s minimum, the call answers one more node
waiting, so that the agent stops its workers (stuck in a collective) and the group re-forms
without the lost node at once, resuming from the newest checkpoint. Below the minimum the
line says that the job waits for it (the collective timeout then restarts the group, and
the rendezvous waits for the node to come back). A member that left the round while its
keep-alive was fresh (its launcher restarts after a failure, or ended) is not lost.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional, TextIO

from torch.distributed.elastic.rendezvous.api import RendezvousInfo


@dataclass
class _Round:
    """The members of the round this node's workers run in: node -> node rank, and the newest keep-alive seen."""

    ranks: dict[Any, int] = field(default_factory=dict)
    seen: dict[Any, datetime] = field(default_factory=dict)


def lost_line(node: Any, node_rank: int, nproc: int, silent: timedelta, goes_on: bool, min_nodes: int) -> str:
    """The launcher's line naming a lost node ``node`` (torch's ``_NodeDesc``: addr, pid)."""
    first = node_rank * nproc
    ranks = f"rank {first}" if nproc == 1 else f"ranks {first}-{first + nproc - 1}"
    then = (
        "the group re-forms without it and resumes from the newest checkpoint"
        if goes_on
        else f"the job needs {min_nodes} node(s) (--nnodes) and waits for it to come back"
    )
    return (
        f"neural_arch launcher: node {node_rank} at {node.addr} (launcher pid {node.pid}, {ranks}) is lost: "
        f"no rendezvous keep-alive for {silent.total_seconds():.0f} s; {then}."
    )


def watch_lost_nodes(handler: Any, nproc: int, out: Optional[TextIO] = None) -> None:
    """Wrap ``handler``'s (a torch ``DynamicRendezvousHandler``) ``next_rendezvous`` and
    ``num_nodes_waiting`` as the module docstring says; a handler without torch's internals
    this relies on (``_state_holder``, ``_settings``, ``_this_node``) is left as it is."""
    holder, settings = getattr(handler, "_state_holder", None), getattr(handler, "_settings", None)
    if holder is None or settings is None or not hasattr(handler, "_this_node"):
        return
    current = _Round()
    next_rendezvous: Callable[[], RendezvousInfo] = handler.next_rendezvous
    num_nodes_waiting: Callable[[], int] = handler.num_nodes_waiting

    def rearmed() -> RendezvousInfo:
        info = next_rendezvous()
        state = holder.state
        current.ranks = {n: r for n, r in state.participants.items() if n != handler._this_node}
        current.seen = {n: state.last_heartbeats.get(n, datetime.now(timezone.utc)) for n in current.ranks}
        return info

    def watched() -> int:
        waiting = num_nodes_waiting()  # syncs the state with the store
        state, now = holder.state, datetime.now(timezone.utc)
        expiry = settings.keep_alive_interval * settings.keep_alive_max_attempt
        if state.closed:
            return waiting
        lost = []
        for node in list(current.ranks):
            beat = state.last_heartbeats.get(node)
            if beat is not None and beat > current.seen[node]:
                current.seen[node] = beat
            if now - current.seen[node] > expiry:
                lost.append(node)
            elif node not in state.participants:  # left while alive: not lost
                del current.ranks[node]
        if not lost:
            return waiting
        goes_on = 1 + len(current.ranks) - len(lost) >= settings.min_nodes
        for node in lost:
            line = lost_line(
                node, current.ranks.pop(node), nproc, now - current.seen[node], goes_on, settings.min_nodes
            )
            print(line, file=out or sys.stderr, flush=True)
        return waiting + (1 if goes_on else 0)

    handler.next_rendezvous = rearmed
    handler.num_nodes_waiting = watched
