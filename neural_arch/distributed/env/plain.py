"""The last two detectors: plain RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT variables
(a hand-written job script), and no launcher at all (one process, world size 1).

Try it: ``python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
(no launcher: source 'local').
"""

from __future__ import annotations

from typing import Optional

from neural_arch.distributed.env.placement import from_rank_variables
from neural_arch.distributed.env.record import ClusterEnv, Environ, with_master_override


def detect(environ: Environ) -> Optional[ClusterEnv]:
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return from_rank_variables("env", environ, "the environment")


def detect_local(environ: Environ) -> ClusterEnv:
    """Always matches: one process. An explicit MASTER_* is still reported (for a later init)."""
    addr, port = with_master_override(environ, None, None)
    return ClusterEnv(source="local", rank=0, world_size=1, master_addr=addr, master_port=port)
