"""Error files cut off mid-write, set aside so that torch elastic's agent can read the rest.

Use (agent.py, when torch's poll failed to parse one): ``if set_aside_torn(error_files): poll again``.
A worker SIGTERMed while its own code (e.g. torch's ``@record``) was writing its elastic error
file leaves it cut off (seen once in CI, in a kill-during-checkpoint test), and torch's agent
would crash reading it instead of restarting; that rank's log still holds the traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable


def set_aside_torn(error_files: Iterable[str]) -> bool:
    """Rename every file of ``error_files`` that is not valid JSON to ``*.torn``; whether there was one."""
    torn = False
    for path in error_files:
        if not os.path.isfile(path):  # none written, or os.devnull when there is no log dir
            continue
        try:
            json.loads(Path(path).read_text())
        except ValueError:
            os.replace(path, f"{path}.torn")
            torn = True
    return torn
