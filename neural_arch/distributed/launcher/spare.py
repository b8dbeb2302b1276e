"""What a warm spare (warm.py) does before it becomes a worker: import torch, then wait for its work.

Run by ``python -u worker.py --warm-spare PIPE LAUNCHER_PID`` (warm.py starts it); worker.py then
runs the worker command line this returns. Standard library only at import: worker.py forgets
what its launcher imports pulled in, and torch must stay.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

from neural_arch.distributed.launcher.lifeline import die_with_parent


def wait_for_work(pipe: int, parent_pid: int) -> Optional[list[str]]:
    """Import torch, then read the launcher's assignment from ``pipe``: set its environment and
    ``sys.argv`` and return the worker's options and script (what ``worker.main`` parses), or
    None when the pipe closed empty (the job ended before this spare was needed)."""
    die_with_parent(parent_pid)  # a spare outlives no launcher, as no worker does
    import torch  # noqa: F401 - the point of a spare: its rank starts with torch imported
    import torch.distributed  # noqa: F401

    with os.fdopen(pipe, "rb") as assignment:
        data = assignment.read()
    if not data:
        return None
    job = json.loads(data)
    os.environ.clear()
    os.environ.update(job["env"])
    args = job["args"]  # [python, "-u", WORKER, options..., script, script args], as a cold start's
    sys.argv = args[2:]
    return args[3:]
