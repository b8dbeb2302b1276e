"""Write this rank's flight-recorder dump where torch's analyzer reads it.

Use: ``write_dump(directory, rank, recorder.dumps(stacks=True))``, then, once every rank wrote
its file: ``python -m torch.distributed.flight_recorder.fr_trace DIRECTORY`` matches the ranks'
collectives and names the culprit. ``TORCH_FR_DUMP_TEMP_FILE=PREFIX`` (torch's variable) puts
the files at ``PREFIX<rank>`` instead, as torch's own dumps.
"""

from __future__ import annotations

import os
import pickle
from typing import Mapping

import torch.distributed as dist


def dump_path(directory: str, rank: int) -> str:
    """Where this rank writes its dump: torch's ``TORCH_FR_DUMP_TEMP_FILE`` prefix (rank appended)
    when the job set it, else ``rank_<N>`` in ``directory``."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    return f"{prefix}{rank}" if prefix else os.path.join(directory, f"rank_{rank}")


def shown_directory(directory: str) -> str:
    """The directory the verdict names: where the files of ``dump_path`` are."""
    return os.path.dirname(dump_path(directory, 0)) if os.environ.get("TORCH_FR_DUMP_TEMP_FILE") else directory


def for_analyzer(taken: Mapping[str, dict]) -> dict:
    """The dump torch's analyzer reads for this rank: the recorder of the default group's backend."""
    data = dict(taken.get("_dump_nccl_trace" if dist.get_backend() == "nccl" else "_dump_fr_trace", {}))
    # Torch 2.13's gloo recorder registers its groups under an empty name, and the analyzer looks
    # them up by name: fill the table in from torch.distributed's own registry.
    config = {k: v for k, v in data.get("pg_config", {}).items() if k}
    for pg, name in list(dist.distributed_c10d._world.pg_names.items()):
        ranks = dist.get_process_group_ranks(pg)
        config.setdefault(name, {"name": name, "desc": getattr(pg, "group_desc", "") or "", "ranks": str(ranks)})
    data["pg_config"] = config
    return data


def write_dump(directory: str, rank: int, taken: Mapping[str, dict]) -> None:
    """Write the analyzer's dump atomically; a failed write is ignored (the verdict matters more)."""
    path = dump_path(directory, rank)
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path + ".tmp", "wb") as f:
            pickle.dump(for_analyzer(taken), f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass
