"""A restart is not announced for a rendezvous that is already gone; a silent store does not hold it up.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_rendezvous_probe.py -q``
In-process, on handlers that behave as torch's c10d handler does when node 0's store is closed
(raises at once), cut off (does not answer) or alive. The real race, two launchers and node 0
killed: test_torchrun_options_contract.py::test_losing_the_c10d_host_is_one_line_on_the_other_node.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from torch.distributed.elastic.rendezvous import RendezvousConnectionError

from neural_arch.distributed.launcher.rendezvous_probe import closed_rendezvous, raise_if_rendezvous_lost


class Handler:
    """``num_nodes_waiting`` as a c10d handler's: ``behaviour`` says what the store does."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.release = threading.Event()
        self.answered = threading.Event()

    def num_nodes_waiting(self) -> int:
        if self.behaviour == "closed":
            raise RendezvousConnectionError("The connection to the C10d store has failed.")
        if self.behaviour == "silent":
            self.release.wait(30)  # a store behind a cut network: no answer until its timeout
            self.answered.set()
        if self.behaviour == "broken":
            raise KeyError("not a rendezvous error")
        return 0


def test_a_closed_store_is_the_lost_rendezvous():
    found = closed_rendezvous(Handler("closed"), wait_s=5)
    assert isinstance(found, RendezvousConnectionError)


@pytest.mark.parametrize("behaviour", ["alive", "broken"])
def test_a_store_that_answers_or_fails_otherwise_is_not_lost(behaviour):
    assert closed_rendezvous(Handler(behaviour), wait_s=5) is None


def test_a_silent_store_is_left_to_the_restart_after_the_wait():
    handler = Handler("silent")
    try:
        assert closed_rendezvous(handler, wait_s=0.3) is None
        assert not handler.answered.is_set()  # it returned while the store was still silent
    finally:
        handler.release.set()


def test_the_agent_raises_the_lost_rendezvous_for_its_launch_line():
    group = SimpleNamespace(spec=SimpleNamespace(rdzv_handler=Handler("closed")))
    with pytest.raises(RendezvousConnectionError):
        raise_if_rendezvous_lost(group)
    raise_if_rendezvous_lost(SimpleNamespace(spec=SimpleNamespace(rdzv_handler=Handler("alive"))))
