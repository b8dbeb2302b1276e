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


def keepers(sizes: list[int]) -> tuple[KeeperAddress, ...]:
    """Every rank's keeper, ranks numbered node after node (each on its node's address)."""
    return tuple(
        KeeperAddress(f"10.0.0.{node}", 7000, TOKEN, f"10.0.0.{node}")
        for node, size in enumerate(sizes)
        for _ in range(size)
    )


def hosts(sizes: list[int]) -> tuple[str, ...]:
    return tuple(f"node{node}" for node, size in enumerate(sizes) for _ in range(size))


def ring(sizes: list[int], rank: int, held: Optional[tuple[Optional[HeldStep], ...]] = None) -> SnapshotRing:
    world = sum(sizes)
    return SnapshotRing(rank, keepers(sizes), held or (None,) * world, hosts(sizes))


def pushed(sizes: list[int], step: int, sharded: bool) -> dict[KeeperAddress, HeldStep]:
    """What each keeper holds once every rank pushed ``step`` to its ``targets``."""
    everyone = keepers(sizes)
    parts = len(everyone) if sharded else 1
    got: dict[KeeperAddress, set[int]] = {}
    expected: dict[KeeperAddress, frozenset[int]] = {}
    for rank in range(len(everyone)):
        for address, holds in ring(sizes, rank).targets(sharded):
            holds = frozenset({0}) if holds is None else holds
            assert expected.setdefault(address, holds) == holds, "two ranks told one keeper different parts"
            assert (rank if sharded else 0) in holds
            got.setdefault(address, set()).add(rank if sharded else 0)
    assert all(got[a] == set(expected[a]) for a in got), "a keeper would never complete the step"
    return {a: HeldStep(step, parts, tuple(sorted(got[a]))) for a in got}


def restarted(sizes: list[int], held: dict[KeeperAddress, HeldStep], lost: set[int], rank: int) -> SnapshotRing:
    """Rank ``rank``'s ring after the nodes ``lost`` came back empty (their keepers hold nothing)."""
    answers = tuple(None if int(a.host.rsplit(".", 1)[1]) in lost else held.get(a) for a in keepers(sizes))
    return ring(sizes, rank, answers)


def test_two_nodes_of_two_ranks():
    sizes = [2, 2]
    two = ring(sizes, 2)
    assert two.nodes == [[0, 1], [2, 3]] and two.node_of(3) == 1 and two.leader
    assert two.targets(sharded=False) == [(keepers(sizes)[2], None)]  # its node's whole copy
    assert two.targets(sharded=True) == [
        (keepers(sizes)[2], frozenset({0, 1, 2, 3})),
        (keepers(sizes)[0], frozenset({0, 1, 2, 3})),
    ]
    assert ring(sizes, 3).targets(sharded=False) == []  # not its node's leader
    held = pushed(sizes, 8, sharded=True)
    back = restarted(sizes, held, lost={1}, rank=3)  # node 1 replaced: its keeper is empty
    assert back.newest(4) == 8 and back.newest(2) is None  # another world size: no step fits
    assert back.source(8, 3) == (False, keepers(sizes)[0])  # from node 0's copy, over the network
    assert restarted(sizes, held, lost={1}, rank=0).source(8, 0) == (True, keepers(sizes)[0])


def test_one_node_is_its_own_ring():
    sizes = [3]
    held = pushed(sizes, 5, sharded=True)
    assert list(held.values()) == [HeldStep(5, 3, (0, 1, 2))]
    assert restarted(sizes, held, set(), rank=2).source(5, 2) == (True, keepers(sizes)[0])
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
        own, address = back.source(12, part)
        assert address is not None and int(address.host.rsplit(".", 1)[1]) not in lost
        assert own == (back.node_of(rank) not in lost)  # a live node reads its own keeper
    if sharded and len(sizes) >= 3:  # two neighbours lost: the first one's parts are gone
        first = data.draw(st.integers(0, len(sizes) - 1), label="first of two lost")
        assert restarted(sizes, held, {first, (first + 1) % len(sizes)}, 0).newest(parts) is None


def test_the_newest_step_whose_parts_are_all_held_wins():
    """Node 0 has step 9 complete, node 1 (back after a loss) only step 6 of a later push that
    reached it: a step counts where every part is held somewhere, the newest such."""
    sizes = [1, 1]
    everyone = keepers(sizes)
    both = ring(sizes, 0, (HeldStep(9, 2, (0, 1)), HeldStep(6, 2, (0, 1))))
    assert both.newest(2) == 9 and both.source(6, 0) == (False, everyone[1])
    split = ring(sizes, 0, (HeldStep(9, 2, (0,)), HeldStep(9, 2, (1,))))
    assert split.newest(2) == 9 and split.source(9, 1) == (False, everyone[1])
    assert ring(sizes, 0, (HeldStep(9, 2, (0,)), None)).newest(2) is None


def test_a_keeper_on_loopback_serves_its_own_host_only():
    """A node whose keeper could not listen on its address (``reach`` None, on loopback) keeps
    its own ranks' snapshots; other nodes neither push to it nor fetch from it, so a step whose
    part only it holds is no step to resume from for a rank elsewhere."""
    local = KeeperAddress("127.0.0.1", 7000, TOKEN)
    everyone = (keepers([1])[0], local)
    names = ("node0", "node1")
    held = (HeldStep(4, 2, (0,)), HeldStep(4, 2, (0, 1)))
    zero, one = SnapshotRing(0, everyone, held, names), SnapshotRing(1, everyone, held, names)
    assert zero.nodes == [[0], [1]]
    assert zero.targets(sharded=True) == [(everyone[0], frozenset({0, 1}))]  # not to node 1's loopback
    assert one.targets(sharded=True) == [(local, frozenset({0, 1})), (everyone[0], frozenset({0, 1}))]
    assert one.source(4, 1) == (True, local) and zero.source(4, 1) == (False, None)
    assert zero.newest(2) == one.newest(2) == 4  # each rank reaches its own part
    assert SnapshotRing(0, everyone, (None, held[1]), names).newest(2) is None  # rank 0's part: only on node 1
    same_port = SnapshotRing(0, (local, local), (None, None), names)  # two hosts, both on loopback:7000
    assert same_port.nodes == [[0], [1]] and same_port.targets(sharded=True) == [(local, frozenset({0, 1}))]
