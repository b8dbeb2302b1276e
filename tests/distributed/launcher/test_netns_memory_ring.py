"""A host lost and replaced in a sharded (FSDP) 2-node job: its rank's shards come back from the
other host's memory, across the network, and the run ends bitwise equal.

Run (as root): ``.venv/bin/python -m pytest tests/distributed/launcher/test_netns_memory_ring.py -q``

Two hosts of tests/helpers/netns.py, one launcher each (``--nnodes=2``, c10d rendezvous hosted by
A, one worker a node), train the tiny float64 MLP as FSDP x2 (``parallel.dp_shard=2``: each rank
holds half of every parameter and of the optimizer state) with **no disk checkpoint**
(``checkpoint.every_steps=0``) and a memory snapshot every 2 steps. Each rank pushes its part to
its own node's keeper and to the other node's (training/snapshot_ring.py), so after step 6 each
keeper holds both parts. Both ranks are held after step 8; then host B vanishes (its link drops
every packet, every process on it, its launcher and keeper included, is SIGKILLed). A's rank
goes into step 9's collective; A's launcher finds B lost by the rendezvous keep-alive and
waits for a second node. B comes back as a replaced host would: its link up, a new launcher
with a new, empty keeper. The group re-forms at 2 nodes from the newest step both parts of
which A's keeper holds (6 or 8, see CUT); A's rank maps its own part from its keeper, B's rank
takes its part (the shards nobody else had) from A's keeper over the namespace network and
says so, and the run goes on to step 12 without reading any file.

The final weights must equal those of an uninterrupted FSDP x2 run on one node computed in the
test (bitwise: the same world size and layout, so the same sums in the same order). Runtime:
about 90 s on 2 shared cores.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.cli import cli
from tests.helpers.multiproc import free_port
from tests.helpers.netns import hosts, netns_unavailable
from tests.helpers.netns_jobs import finished, log_of, output, start_node, starts, wait_until
from tests.helpers.run_outputs import assert_params, final_params
from tests.helpers.trainer_runs import BASE

pytestmark = [
    pytest.mark.machine,  # network namespaces: one multi-host test at a time
    pytest.mark.multiprocess,
    pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable())),
]

CUT, STEPS = 8, 12
"""Both ranks are held after step CUT; B vanishes then. Each rank's push of step 8 began with
waiting for its push of step 6 (to both keepers) before the hold, so step 6 is complete in both
keepers when B vanishes, and step 8 may be too: the restart takes the newest complete one."""
SETTINGS = (
    f"training.steps={STEPS}",
    "schedule.decay=constant",
    "logging.every_steps=1",
    "parallel.dp_shard=2",
    "checkpoint.every_steps=0",
    "checkpoint.memory_every=2",
)
ARGS = [*BASE, *(arg for setting in SETTINGS for arg in ("--set", setting))]
FLAGS = ["--nnodes=2", "--rdzv_id=memory-ring"]


@pytest.mark.timeout(600)
def test_a_replaced_host_takes_its_shards_from_the_other_hosts_keeper_bitwise(tmp_path):
    gate, run, port = tmp_path / "gate", tmp_path / "run", free_port()
    gate.mkdir()
    (gate / f"hold_{CUT}").touch()
    with hosts(2) as (a, b):
        procs = [start_node(host, a, port, tmp_path, "", FLAGS, ARGS) for host in (a, b)]
        reference = tmp_path / "reference"  # meanwhile: the uninterrupted FSDP x2 run on one node
        ref = cli("train", *ARGS, "--nproc-per-node", "2", "--set", f"run.dir={reference}")
        assert ref.returncode == 0, ref.stderr
        holding = [gate / f"holding_{CUT}_{rank}" for rank in range(2)]
        wait_until(lambda: all(h.exists() for h in holding), f"both ranks held after step {CUT}", 240, procs)
        b.drop(True)  # host B vanishes with its launcher, its keeper and its rank
        b.kill_all()
        (gate / f"hold_{CUT}").unlink()
        b.drop(False)  # and is replaced: a new launcher, an empty keeper
        procs.append(start_node(b, a, port, tmp_path, "-again", FLAGS, ARGS))
        assert finished([procs[0], procs[2]], timeout=400) == [0, 0], output(procs)
    text = output(procs)
    resumed = re.search(
        rf"resuming from step (\d+) of {STEPS} \(memory snapshot step \d+ at {re.escape(a.addr)}:", text
    )
    assert resumed and int(resumed.group(1)) in (6, CUT), text
    step = int(resumed.group(1))
    assert starts(run) == ["world 2, step 0", f"world 2, step {step}"], (starts(run), text)
    # the rank on the new host B took its own part (its shards) from A's keeper, over the network
    taken = rf"rank (\d): part \1 of memory snapshot step {step} at {re.escape(a.addr)}:\d+, another node's keeper"
    assert re.search(taken, log_of(procs[2])), text
    assert [p.name for p in (run / "checkpoints").glob("step_*")] == [f"step_{STEPS:08d}"]  # the last step's only
    assert_params(final_params(run), final_params(reference), atol=0)
