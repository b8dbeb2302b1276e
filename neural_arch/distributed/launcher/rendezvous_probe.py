"""Whether a failed attempt's rendezvous is already gone, asked before announcing a restart.

Used by the launcher's agent (agent.py); not run directly. In-process test:
``.venv/bin/python -m pytest tests/distributed/launcher/test_rendezvous_probe.py -q``

When node 0's launcher dies, the other nodes' workers lose their peers at the same moment as
their agents lose the rendezvous store. Whichever an agent notices first decides what the user
reads: a worker's "Connection reset by peer" announced as a restart, then the lost rendezvous
(two lines, the first one misleading), or the lost rendezvous alone. A quick look at the store
before announcing makes it the second every time. The look is bounded: a store behind a cut
network does not answer at all (it may come back: the restart's rendezvous waits for it up to
read_timeout), and the restart must be announced without waiting for that.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from torch.distributed.elastic.rendezvous import RendezvousError

LOOK_SECONDS = 2.0
"""How long to wait for the store's answer before announcing the restart anyway."""


def closed_rendezvous(handler: Any, wait_s: float = LOOK_SECONDS) -> Optional[RendezvousError]:
    """The RendezvousError a look at ``handler``'s store raises within ``wait_s`` (a closed
    connection raises at once), else None: it answered, or is silent (unknown: left to the
    restart). A static rendezvous answers without asking its store, so it is never lost here."""
    found: list[BaseException] = []

    def look() -> None:
        try:
            handler.num_nodes_waiting()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which keeps rendezvous errors
            found.append(exc)

    # A daemon thread: a silent store holds it until the store's own timeout, never the launcher.
    thread = threading.Thread(target=look, name="rendezvous-probe", daemon=True)
    thread.start()
    thread.join(wait_s)
    if found and isinstance(found[0], RendezvousError):
        return found[0]
    return None


def raise_if_rendezvous_lost(worker_group: Any) -> None:
    """Raise the lost rendezvous's error (launch.py prints it as one line) if the store of
    ``worker_group``'s rendezvous is gone (on one node it is this launcher's own, never gone)."""
    lost = closed_rendezvous(worker_group.spec.rdzv_handler)
    if lost is not None:
        raise lost
