"""How a worker finds its node's snapshot keeper: a file its launcher agent leaves in the worker's folder.

Use (the agent, for each worker it starts; the worker, once)::

    write_keeper_file(folder, keeper.address)   # agent: folder of the worker's TORCHELASTIC_ERROR_FILE
    address = keeper_address()                  # worker: KeeperAddress, or None (no keeper: torchrun, none)

Why a file and not a variable: the project keeps environment variables out of its internal
settings, and the folder torch elastic makes per worker and attempt is already the launcher's
and the worker's own (``env/worker_output.py`` names it; the torchrun-contract branch's
``launcher/channel.py`` talks through it the other way). The file holds the job token that the
keeper checks, so it is created 0600 (only the job's user reads it) and written atomically (a
worker never reads half of it). A worker of another launcher finds no file and takes no snapshots.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from neural_arch.distributed.checkpoint.keeper_protocol import KeeperAddress
from neural_arch.distributed.env.worker_output import output_settings
from neural_arch.distributed.launcher.job_token import JobToken

KEEPER_FILE = "neural_arch.keeper"


def write_keeper_file(folder: Path, address: KeeperAddress) -> Path:
    """Leave ``address`` (with its token) for the worker whose folder is ``folder``; the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path, tmp = folder / KEEPER_FILE, folder / f".{KEEPER_FILE}.{os.getpid()}"
    found = {"host": address.host, "port": address.port, "token": address.token.value, "reach": address.reach}
    text = json.dumps(found)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)
    return path


def read_keeper_file(folder: Path) -> Optional[KeeperAddress]:
    """The address in ``folder``'s keeper file; None where there is none or it cannot be read whole."""
    try:
        found = json.loads((folder / KEEPER_FILE).read_text())
        reach = found.get("reach")
        token = JobToken(str(found["token"]), KEEPER_FILE)
        return KeeperAddress(str(found["host"]), int(found["port"]), token, None if reach is None else str(reach))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keeper_address() -> Optional[KeeperAddress]:
    """This worker's keeper, where its launcher left the file; None otherwise."""
    _, folder = output_settings()
    return None if folder is None else read_keeper_file(Path(folder))
