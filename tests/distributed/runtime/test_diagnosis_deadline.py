"""Diagnosing a failure never waits for an unreachable store: every store call it makes has a
deadline (runtime/deadline.py, heartbeat.py). In-process, with a store whose calls never return,
as a TCPStore client's do while the link to its host is down; the real partition is in
tests/distributed/launcher/test_netns_partition.py.

Run: ``.venv/bin/python -m pytest tests/distributed/runtime/test_diagnosis_deadline.py -q``
"""

from __future__ import annotations

import threading
import time

import pytest
import torch.distributed as dist

from neural_arch.distributed.runtime import heartbeat
from neural_arch.distributed.runtime.deadline import within


class _CutOffStore:
    """Every call blocks until the test ends: what a store client does in a partition."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def check(self, keys: list[str]) -> bool:
        self.released.wait()
        return False

    get = set = check


@pytest.fixture
def cut_off(monkeypatch):
    store = _CutOffStore()
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_store", lambda: store)
    monkeypatch.setattr(heartbeat, "_sequence", lambda group: 7)
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_group", lambda: None)
    yield store
    store.released.set()


def test_within_returns_raises_and_times_out():
    assert within(1, lambda: 3, "adding") == 3
    with pytest.raises(KeyError):
        within(1, lambda: {}["x"], "looking up")
    with pytest.raises(TimeoutError, match="sleeping took more than 0.2 s"):
        within(0.2, lambda: time.sleep(5), "sleeping")


@pytest.mark.timeout(60)
def test_diagnosis_of_a_timeout_ends_when_the_store_does_not_answer(cut_off):
    # Was: report_failure -> describe_stragglers -> read_beats -> store.check, blocked for ever.
    line = heartbeat.describe_stragglers()  # a hang fails by the test's timeout; no verdict on seconds
    assert line is not None and "the job's store did not answer within 5 s" in line, line
    assert "rank 1 timed out in collective #7" in line and "\n" not in line
    assert heartbeat.peers_stopped() is None  # the teardown hint's reads are bounded too
    assert heartbeat.describe_peers() == "their state is unreadable"
