"""A worker script for the snapshot keeper's launcher tests: ``keeper_probe.py OUT_DIR``.

Attempt 0 pushes step 5 to the keeper its launcher named (``keeper_file.keeper_address``) and
exits 1; a restarted attempt asks that keeper for its newest step. Each attempt writes
OUT_DIR/attempt_<TORCHELASTIC_RESTART_COUNT>.json: whether it found a keeper, the keeper file's
mode, and the newest step (None without a keeper). Under plain torchrun it finds none.
"""

import json
import os
import sys
from pathlib import Path

from neural_arch.distributed.checkpoint.keeper_file import KEEPER_FILE, keeper_address
from neural_arch.distributed.checkpoint.keeper_protocol import KeeperClient

out_dir, attempt = Path(sys.argv[1]), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
address = keeper_address()
record = {"found": address is not None, "mode": None, "newest": None}
if address is not None:
    client = KeeperClient(address)
    if attempt == "0":
        client.put(5, 0, 1, [b"the state of step 5"])
    record["newest"] = client.newest()
    record["mode"] = oct(os.stat(Path(os.environ["TORCHELASTIC_ERROR_FILE"]).parent / KEEPER_FILE).st_mode & 0o777)
(out_dir / f"attempt_{attempt}.json").write_text(json.dumps(record))
sys.exit(1 if address is not None and attempt == "0" else 0)
