"""Which node's keeper holds which memory-snapshot parts, and where a restarted rank finds its own.

Use (every rank of a run with memory snapshots, once per attempt; ``memory_snapshot.py`` does)::

    ring = SnapshotRing.gather(client.address, client.held())   # collective: one all_gather
    for address, holds in ring.targets(sharded):                 # where this rank pushes its part
        KeeperClient(address).put(step, part, parts, chunks, holds)
    step = ring.newest(parts)            # the newest step of which some keeper holds every part
    own, address = ring.source(step, part, parts)   # this rank's own keeper where it holds the part

Why: a keeper lives in its node's launcher, so it outlives the node's workers but not the node.
Each rank tells the others its host name, its keeper's address and what that keeper holds;
ranks with the same keeper are one node, and nodes are ordered by their lowest rank, the same
order on every rank. A keeper on loopback (a one-node job's, or one whose node address is not
this machine's or is a loopback one) serves its own host's ranks only. Who keeps what:

- A replicated state (DDP) is rank 0's alone: it holds what is gathered on rank 0 only (every
  rank's random state, a gradient compressor's error buffers, a full state dict of a sharded
  model). Rank 0 pushes it to its own node's keeper and to the next node's.
- A sharded state (each rank's own shards) is pushed by every rank to its node's keeper and to
  the next node's (node i -> i + 1, the last to the first): a keeper holds its own node's parts
  and those of the previous node's ranks that reach it.

Either way any one node lost leaves a copy of every part on a live node (where every keeper
listens on its node's address). The cost: two serializations per push, one of them over the
network, and a keeper holds up to two nodes' parts.

Restarted ranks agree on the newest step every part of which some keeper holds complete
(``newest``) and each fetches its part from its own keeper where it can (mapped, no copy),
else over the network from the first node that holds it (``source``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Optional, cast

import neural_arch.distributed as nd
from neural_arch.distributed.checkpoint.keeper_protocol import HeldStep, KeeperAddress


@dataclass(frozen=True)
class SnapshotRing:
    """Every rank's keeper, what each held when the attempt began, and every rank's host name."""

    rank: int
    keepers: tuple[KeeperAddress, ...]
    held: tuple[Optional[HeldStep], ...]
    hosts: tuple[str, ...]
    """Every rank's host name (a keeper on loopback is reached from its own host only)."""

    @classmethod
    def gather(cls, address: KeeperAddress, held: Optional[HeldStep]) -> SnapshotRing:
        """The ring of this process group (collective): ``address`` is this rank's keeper,
        ``held`` what it holds (None: nothing, or it could not be asked)."""
        mine = (address, held, socket.gethostname())
        found = cast(list[tuple[KeeperAddress, Optional[HeldStep], str]], nd.all_gather_object(mine))
        keepers, held_by, hosts = (
            tuple(a for a, _, _ in found),
            tuple(h for _, h, _ in found),
            tuple(n for *_, n in found),
        )
        return cls(nd.get_rank(), keepers, held_by, hosts)

    def _key(self, rank: int) -> tuple[str, str, int]:
        keeper = self.keepers[rank]
        return (self.hosts[rank] if keeper.local_only else "", keeper.host, keeper.port)

    def _reaches(self, rank: int, keeper: int) -> bool:
        """Whether ``rank`` can reach the keeper of rank ``keeper``."""
        return not self.keepers[keeper].local_only or self.hosts[keeper] == self.hosts[rank]

    @property
    def nodes(self) -> list[list[int]]:
        """The ranks of each node (one keeper each), nodes in the order of their lowest rank."""
        groups: dict[tuple[str, str, int], list[int]] = {}
        for rank in range(len(self.keepers)):
            groups.setdefault(self._key(rank), []).append(rank)
        return list(groups.values())

    def node_of(self, rank: int) -> int:
        return next(i for i, ranks in enumerate(self.nodes) if rank in ranks)

    @property
    def leader(self) -> bool:
        """Whether this rank is its node's lowest (it tells its launcher of the node's progress)."""
        return self.nodes[self.node_of(self.rank)][0] == self.rank

    def holds(self, node: int) -> frozenset[int]:
        """The parts of a sharded state (one per rank) that ``node``'s keeper holds: its own
        ranks' and those of the previous node's ranks that reach it."""
        nodes = self.nodes
        keeper = nodes[node][0]
        behind = nodes[(node - 1) % len(nodes)]
        return frozenset(nodes[node]) | frozenset(r for r in behind if self._reaches(r, keeper))

    def targets(self, sharded: bool) -> list[tuple[KeeperAddress, Optional[frozenset[int]]]]:
        """(keeper, the parts it holds; None: the one part of a replicated state) this rank
        pushes to: its own node's keeper, then the next node's where it reaches it. A replicated
        state is rank 0's alone (only rank 0's copy holds what is gathered on rank 0: every
        rank's random state, a compressor's error buffers, a full state dict)."""
        if not sharded and self.rank != 0:
            return []
        nodes = self.nodes
        mine = self.node_of(self.rank)
        ahead = (mine + 1) % len(nodes)
        out: list[tuple[KeeperAddress, Optional[frozenset[int]]]] = [
            (self.keepers[self.rank], self.holds(mine) if sharded else None)
        ]
        if ahead != mine and self._reaches(self.rank, nodes[ahead][0]):
            out.append((self.keepers[nodes[ahead][0]], self.holds(ahead) if sharded else None))
        return out

    def _by_node(self) -> list[Optional[HeldStep]]:
        return [self.held[ranks[0]] for ranks in self.nodes]

    def newest(self, parts: int) -> Optional[int]:
        """The newest step pushed in ``parts`` parts of which every rank can reach its part
        (``parts`` 1: the replicated state, part 0 for all), or None."""
        steps = {h.step for h in self._by_node() if h is not None and h.parts == parts}
        for step in sorted(steps, reverse=True):
            if all(self._holder(r, step, r if parts > 1 else 0, parts) is not None for r in range(len(self.keepers))):
                return step
        return None

    def source(self, step: int, part: int, parts: int) -> tuple[bool, Optional[KeeperAddress]]:
        """Where ``part`` of ``step`` (of ``parts``) is fetched from: (True, this rank's keeper) where that holds
        it, else (False, the first other node's keeper that does and is reachable), else (False, None)."""
        holder = self._holder(self.rank, step, part, parts)
        return (holder is not None and self._key(holder) == self._key(self.rank)), (
            None if holder is None else self.keepers[holder]
        )

    def _holder(self, rank: int, step: int, part: int, parts: int) -> Optional[int]:
        """A rank whose keeper holds ``part`` of ``step`` pushed in ``parts`` parts and which
        ``rank`` reaches, its own first."""
        own = self.held[rank]
        if own is not None and own.has(step, part, parts):
            return rank
        for ranks, held in zip(self.nodes, self._by_node()):
            if held is not None and held.has(step, part, parts) and self._reaches(rank, ranks[0]):
                return ranks[0]
        return None
