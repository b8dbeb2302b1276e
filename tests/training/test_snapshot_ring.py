"""Who keeps which memory-snapshot parts across nodes, and where a restarted rank finds its own
(training/snapshot_ring.py): the ring's rules, on made-up jobs (no process group, no keeper).

Run: ``.venv/bin/python -m pytest tests/training/test_snapshot_ring.py -q`` (in-process, seconds).

A job is a list of node sizes; node i's keeper is ``10.0.0.i:7000``. What a keeper holds after a
push of step S is computed from ``targets`` exactly as the keeper would store it, so these tests
check the claim the ring makes: one lost node leaves every part on a live node.
"""

from __future__ import annotations

from typing import Optional

from hypothesis import given
from hypothesis import strategies as st

from neural_arch.distributed.checkpoint.keeper_protocol import HeldStep, KeeperAddress
from neural_arch.distributed.launcher.job_token import JobToken
from neural_arch.training.snapshot_ring import SnapshotRing
from tests.helpers.property_settings import PROPERTY

TOKEN = JobToken("job", "the test")


def keepers(sizes: list[int], local: frozenset[int] = frozenset()) -> tuple[KeeperAddress, ...]:
    """Every rank's keeper, ranks numbered node after node: each on its node's address, or for
    the nodes in ``local`` on loopback (a keeper that could not listen on its node's address)."""

    def of(node: int) -> KeeperAddress:
        if node in local:
            return KeeperAddress("127.0.0.1", 7000, TOKEN)
        return KeeperAddress(f"10.0.0.{node}", 7000, TOKEN, f"10.0.0.{node}")

    return tuple(of(node) for node, size in enumerate(sizes) for _ in range(size))


def hosts(sizes: list[int]) -> tuple[str, ...]:
    return tuple(f"node{node}" for node, size in enumerate(sizes) for _ in range(size))


def ring(
    sizes: list[int],
    rank: int,
    held: Optional[tuple[Optional[HeldStep], ...]] = None,
    local: frozenset[int] = frozenset(),
) -> SnapshotRing:
    return SnapshotRing(rank, keepers(sizes, local), held or (None,) * sum(sizes), hosts(sizes))


def pushed(sizes: list[int], step: int, sharded: bool, local: frozenset[int] = frozenset()) -> dict[int, HeldStep]:
    """What each node's keeper holds (by node) once every rank pushed ``step`` to its ``targets``,
    stored as a keeper stores it: every keeper that was pushed to must complete the step."""
    everyone, names = keepers(sizes, local), hosts(sizes)
    parts = len(everyone) if sharded else 1
    got: dict[int, set[int]] = {}
    expected: dict[int, frozenset[int]] = {}
    for rank in range(len(everyone)):
        for address, holds in ring(sizes, rank, local=local).targets(sharded):
            node = next(  # the node of that keeper, as the connection would find it (loopback: this host's)
                int(names[r][4:])
                for r in range(len(everyone))
                if everyone[r] == address and (not address.local_only or names[r] == names[rank])
            )
            holds = frozenset({0}) if holds is None else holds
            assert expected.setdefault(node, holds) == holds, "two ranks told one keeper different parts"
            assert (rank if sharded else 0) in holds
            got.setdefault(node, set()).add(rank if sharded else 0)
    assert all(got[n] == set(expected[n]) for n in got), f"a keeper would never complete the step: {got} {expected}"
    return {n: HeldStep(step, parts, tuple(sorted(got[n]))) for n in got}


def restarted(
    sizes: list[int], held: dict[int, HeldStep], lost: set[int], rank: int, local: frozenset[int] = frozenset()
) -> SnapshotRing:
    """Rank ``rank``'s ring after the nodes ``lost`` came back empty (their keepers hold nothing)."""
    nodes = [node for node, size in enumerate(sizes) for _ in range(size)]
    answers = tuple(None if node in lost else held.get(node) for node in nodes)
    return ring(sizes, rank, answers, local)


def test_two_nodes_of_two_ranks():
    sizes = [2, 2]
    everyone = keepers(sizes)
    two = ring(sizes, 2)
    assert two.nodes == [[0, 1], [2, 3]] and two.node_of(3) == 1 and two.leader
    assert ring(sizes, 0).targets(sharded=False) == [(everyone[0], None), (everyone[2], None)]  # rank 0's copy
    assert two.targets(sharded=False) == []  # a replicated state is rank 0's alone
    assert two.targets(sharded=True) == [(everyone[2], frozenset({0, 1, 2, 3})), (everyone[0], frozenset({0, 1, 2, 3}))]
    held = pushed(sizes, 8, sharded=True)
    back = restarted(sizes, held, lost={1}, rank=3)  # node 1 replaced: its keeper is empty
    assert back.newest(4) == 8 and back.newest(2) is None  # another world size: no step fits
    assert back.source(8, 3, 4) == (False, everyone[0])  # from node 0's copy, over the network
    assert back.source(8, 3, 2) == (False, None)  # the same step number of another world size is not it
    assert restarted(sizes, held, lost={1}, rank=0).source(8, 0, 4) == (True, everyone[0])


def test_one_node_is_its_own_ring():
    sizes = [3]
    held = pushed(sizes, 5, sharded=True)
    assert list(held.values()) == [HeldStep(5, 3, (0, 1, 2))]
    assert restarted(sizes, held, set(), rank=2).source(5, 2, 3) == (True, keepers(sizes)[0])
    assert restarted(sizes, held, {0}, rank=2).newest(3) is None


@PROPERTY
@given(sizes=st.lists(st.integers(1, 3), min_size=1, max_size=5), sharded=st.booleans(), data=st.data())
def test_any_one_node_lost_leaves_every_part_on_a_live_node(sizes, sharded, data):
    held = pushed(sizes, 12, sharded)
    world, parts = sum(sizes), sum(sizes) if sharded else 1
    lost = {data.draw(st.integers(0, len(sizes) - 1), label="lost node")} if len(sizes) > 1 else set()
    for rank in range(world):
        back = restarted(sizes, held, lost, rank)
        assert back.newest(parts) == 12
        part = rank if sharded else 0
        own, address = back.source(12, part, parts)
        assert address is not None and int(address.host.rsplit(".", 1)[1]) not in lost
        node = back.node_of(rank)
        assert own == (node not in lost and node in held)  # where its own keeper holds it, it reads that
    if sharded and len(sizes) >= 3:  # two neighbours lost: the first one's parts are gone
        first = data.draw(st.integers(0, len(sizes) - 1), label="first of two lost")
        assert restarted(sizes, held, {first, (first + 1) % len(sizes)}, 0).newest(parts) is None


@PROPERTY
@given(sizes=st.lists(st.integers(1, 3), min_size=2, max_size=5), sharded=st.booleans(), data=st.data())
def test_keepers_on_loopback_still_complete_every_step_and_serve_their_own_host(sizes, sharded, data):
    """Some nodes' keepers on loopback (reach None): no keeper waits for a part that cannot
    reach it (``pushed`` checks it); with nothing lost a sharded run always resumes (each part
    is in its own node's keeper), a replicated one where every node reaches a node holding
    rank 0's copy; a part is only ever fetched from a keeper its rank reaches."""
    local = frozenset(data.draw(st.sets(st.integers(0, len(sizes) - 1), min_size=1), label="loopback nodes"))
    held = pushed(sizes, 7, sharded, local)
    parts = sum(sizes) if sharded else 1
    reached = all(any(n == h or h not in local for h in held) for n in range(len(sizes)))
    for rank in range(sum(sizes)):
        back = restarted(sizes, held, set(), rank, local)
        assert back.newest(parts) == (7 if sharded or reached else None)
        own, address = back.source(7, rank if sharded else 0, parts)
        assert address is None or not address.local_only or own


def test_the_newest_step_whose_parts_are_all_held_wins():
    """Node 0 has step 9 complete, node 1 (back after a loss) only step 6 of a later push that
    reached it: a step counts where every part is held somewhere, the newest such."""
    sizes = [1, 1]
    everyone = keepers(sizes)
    both = ring(sizes, 0, (HeldStep(9, 2, (0, 1)), HeldStep(6, 2, (0, 1))))
    assert both.newest(2) == 9 and both.source(6, 0, 2) == (False, everyone[1])
    split = ring(sizes, 0, (HeldStep(9, 2, (0,)), HeldStep(9, 2, (1,))))
    assert split.newest(2) == 9 and split.source(9, 1, 2) == (False, everyone[1])
    assert ring(sizes, 0, (HeldStep(9, 2, (0,)), None)).newest(2) is None


def test_a_keeper_on_loopback_serves_its_own_host_only():
    """Node 1's keeper is on loopback: node 0's rank neither pushes to it nor fetches from it,
    so node 1 holds only its own part and node 0 both; lose node 0 and rank 0's part is gone."""
    sizes, local = [1, 1], frozenset({1})
    everyone = keepers(sizes, local)
    assert ring(sizes, 0, local=local).targets(sharded=True) == [(everyone[0], frozenset({0, 1}))]
    assert ring(sizes, 1, local=local).targets(sharded=True) == [
        (everyone[1], frozenset({1})),
        (everyone[0], frozenset({0, 1})),
    ]
    held = pushed(sizes, 4, sharded=True, local=local)
    assert held == {0: HeldStep(4, 2, (0, 1)), 1: HeldStep(4, 2, (1,))}
    assert restarted(sizes, held, {1}, 1, local).source(4, 1, 2) == (False, everyone[0])
    assert restarted(sizes, held, {0}, 1, local).newest(2) is None
    two_hosts_one_port = SnapshotRing(0, (everyone[1], everyone[1]), (None, None), ("node0", "node1"))
    assert two_hosts_one_port.nodes == [[0], [1]]  # not one node: each host's loopback is its own
