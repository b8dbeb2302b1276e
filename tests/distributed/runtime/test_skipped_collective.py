"""A collective one rank skipped is named in the script's own terms, and "a peer probably
exited early" is said only when the peer's heartbeat has stopped.

Run: ``.venv/bin/python -m pytest tests/distributed/runtime/test_skipped_collective.py -q``

These are the timeout's messages: the desync check, which names such a skip seconds after it
happens (test_desync.py), is turned off here with torch's ``TORCH_FR_BUFFER_SIZE=0``.
"""

import os
import re
import subprocess
import sys
import time
import warnings

import pytest
import torch

import neural_arch.distributed as nd
from neural_arch.distributed.runtime.process_group import abandon_process_group
from tests.helpers.multiproc import run_ranks

pytestmark = pytest.mark.multiprocess  # every test here spawns ranks or runs a launcher

VERB = "(timed out|failed)"
"""How the waiting rank's own collective ended: its timeout, or, when the absent rank's teardown
closed the connection first (a race that load decides), "failed" (connection closed by peer).
Either way the report must name the absent rank, the calls it entered and the call rank 0 waited in."""

SKIP_THIRD = """
import time
import torch
import neural_arch.distributed as nd
nd.init_process_group()
for call in range(1, 4):
    if nd.get_rank() == 1 and call == 3:
        # rank 1 skips its 3rd all_reduce and goes on; it stays out of its teardown barrier
        # well past rank 0's 5 s timeout, so rank 0 usually times out before rank 1's teardown
        # closes the connection (on a loaded machine it may read "closed by peer" first: VERB)
        time.sleep(15)
        break
    nd.all_reduce(torch.ones(2))
nd.destroy_process_group()
"""


def test_rank0_names_the_rank_and_the_call_it_skipped(tmp_path):
    script = tmp_path / "skip.py"
    script.write_text(SKIP_THIRD)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "neural_arch.distributed.launcher",
            "--nproc_per_node=2",
            "--max_restarts=0",
            "--timeout=5",
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONUNBUFFERED="1", TORCH_FR_BUFFER_SIZE="0"),
    )
    assert proc.returncode != 0
    # The launcher's root cause is the rank that skipped, from rank 0's diagnosis (launcher/blame.py);
    # rank 0's own timeout is its consequence.
    out = proc.stdout + proc.stderr
    assert (
        "root cause: attempt 0, rank 1 (local rank 1, pid " in out
        and "did not arrive (entered only 2 collective calls; " in out
        and re.search(rf"rank 0 {VERB} in collective call #3 \(all_reduce\) waiting for it", out)
    ), out


def _skip_then(rank: int, world_size: int, rank0_stays: bool) -> str:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "0"  # no desync check: this tests the timeout's messages
    nd.init_process_group(timeout=3)
    nd.all_reduce(torch.ones(1))
    if rank == 1:  # skips the second all_reduce
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nd.destroy_process_group()
        return " | ".join(str(w.message) for w in caught)
    if not rank0_stays:
        time.sleep(1)  # rank 1 is in its teardown barrier; leave under it
        abandon_process_group()
        time.sleep(6)  # alive, but out of the group: the heartbeat said "left"
        return ""
    try:
        nd.all_reduce(torch.ones(1))
    except nd.CollectiveFailed as exc:
        time.sleep(5)  # still running (and beating) while rank 1 explains its failed teardown
        abandon_process_group()
        return str(exc)
    return "no error"


def test_exited_early_only_when_the_peer_stopped():
    rank0, rank1 = run_ranks(_skip_then, 2, args=(True,), timeout=60)
    assert re.match(
        rf"rank 0 {VERB} in collective call #2 \(all_reduce\); did not arrive: rank 1 "
        r"\(entered only 1 collective calls; now in destroy_process_group\)",
        rank0,
    ), rank0
    assert "exited early" not in rank1 and "no peer exited: they still beat (rank 0: 2 calls" in rank1, rank1
    _, rank1 = run_ranks(_skip_then, 2, args=(False,), timeout=60)
    assert "exited early" in rank1, rank1
