"""Run a call that may block forever (a store read during a network partition) with a deadline.

Use: ``beats = within(5.0, read_all, "reading the heartbeats")``; raises ``TimeoutError``
after 5 s, leaving the call to finish (or not) in a daemon thread.

Why: a ``TCPStore`` client call waits on its socket without a deadline of its own once the
request is sent; when the link to the store's host is down, it waits until TCP gives up
(about 15 minutes) or for ever. Code that only *diagnoses* a failure must not turn it into
a hang: the process has to exit so that its launcher can restart the job.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def within(seconds: float, call: Callable[[], T], what: str) -> T:
    """``call()``'s result, or its exception; ``TimeoutError`` naming ``what`` after ``seconds``."""
    result: list = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failure.append(exc)

    # A daemon thread: one stuck in the store must not keep the process from exiting.
    thread = threading.Thread(target=run, name="neural_arch-deadline", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{what} took more than {seconds:g} s (the store's host is unreachable?)")
    if failure:
        raise failure[0]
    return result[0]
