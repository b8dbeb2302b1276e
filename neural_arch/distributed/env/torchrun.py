"""Detector for torchrun, torch elastic and our own launcher (TORCHELASTIC_RUN_ID, RANK, ...).

Try it: ``TORCHELASTIC_RUN_ID=x RANK=0 WORLD_SIZE=1 python -c "from neural_arch.distributed.env
import torchrun; print(torchrun.detect(__import__('os').environ))"``
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.placement import from_rank_variables
from neural_arch.distributed.env.record import ClusterEnv, Environ


def detect(environ: Environ) -> Optional[ClusterEnv]:
    # The elastic agent (torchrun, our launcher) always sets a run id or GROUP_RANK; plain
    # RANK/WORLD_SIZE alone is the generic "env" source (plain.py).
    if not ("TORCHELASTIC_RUN_ID" in environ or "GROUP_RANK" in environ):
        return None
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return from_rank_variables("torchrun", environ, "torchrun or the neural_arch launcher")
