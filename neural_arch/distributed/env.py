"""Where am I running? ``detect_cluster_env()`` answers from the launcher's variables.

Try it: ``python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``

This is the only module that reads launcher environment variables. Each source has one
small detector; they are tried in ``DETECTORS`` order and the first that recognises its
variables wins. ``local`` always matches last (one process, world size 1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

Environ = Mapping[str, str]


@dataclass(frozen=True)
class ClusterEnv:
    """The process's place in the job, as the launcher or scheduler described it."""

    source: str
    """Which detector matched: ``torchrun``, ``env`` (plain RANK/WORLD_SIZE) or ``local``."""
    rank: int
    """Global rank of this process, ``0 <= rank < world_size``."""
    world_size: int
    """Total number of processes in the job."""
    local_rank: int = 0
    """Rank of this process on its node (picks the GPU)."""
    local_world_size: int = 1
    """Number of processes on this node."""
    node_rank: int = 0
    """Index of this node in the job."""
    master_addr: Optional[str] = None
    """Host of the rendezvous store (rank 0's node), if the launcher said."""
    master_port: Optional[int] = None
    """Port of the rendezvous store, if the launcher said."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(
                f"{self.source}: world size {self.world_size} must be >= 1; check the launcher's "
                "process count (WORLD_SIZE / --nproc_per_node)."
            )
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"{self.source}: rank {self.rank} is outside 0..{self.world_size - 1} "
                f"(world size {self.world_size}); RANK must be smaller than WORLD_SIZE."
            )
        if not 0 <= self.local_rank < max(self.local_world_size, 1):
            raise ValueError(
                f"{self.source}: local rank {self.local_rank} is outside "
                f"0..{self.local_world_size - 1}; LOCAL_RANK must be smaller than LOCAL_WORLD_SIZE."
            )


def env_int(environ: Environ, key: str, default: Optional[int] = None) -> Optional[int]:
    """Read an integer variable, failing with a message that names it and its value."""
    raw = environ.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(
            f"environment variable {key}={raw!r} is not an integer; unset it or set a whole number."
        ) from None


def _required_int(environ: Environ, key: str) -> int:
    value = env_int(environ, key)
    assert value is not None, key  # callers only ask for keys they checked are present
    return value


def _from_torchrun(environ: Environ) -> Optional[ClusterEnv]:
    # torchrun / torch.distributed.elastic (and our launcher) always set these two.
    if "TORCHELASTIC_RUN_ID" not in environ and "GROUP_RANK" not in environ:
        return None
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return _rank_vars("torchrun", environ)


def _from_env_vars(environ: Environ) -> Optional[ClusterEnv]:
    # Any launcher that exports the PyTorch convention (a Kubernetes PyTorchJob, a hand-made
    # script) without the elastic agent's markers.
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return _rank_vars("env", environ)


def _rank_vars(source: str, environ: Environ) -> ClusterEnv:
    world_size = _required_int(environ, "WORLD_SIZE")
    return ClusterEnv(
        source=source,
        rank=_required_int(environ, "RANK"),
        world_size=world_size,
        local_rank=env_int(environ, "LOCAL_RANK", 0) or 0,
        local_world_size=env_int(environ, "LOCAL_WORLD_SIZE", world_size) or world_size,
        node_rank=env_int(environ, "GROUP_RANK", 0) or 0,
        master_addr=environ.get("MASTER_ADDR") or None,
        master_port=env_int(environ, "MASTER_PORT"),
    )


def _local(environ: Environ) -> Optional[ClusterEnv]:
    return ClusterEnv(
        source="local",
        rank=0,
        world_size=1,
        master_addr=environ.get("MASTER_ADDR") or None,
        master_port=env_int(environ, "MASTER_PORT"),
    )


Detector = Callable[[Environ], Optional[ClusterEnv]]

DETECTORS: tuple[tuple[str, Detector], ...] = (
    ("torchrun", _from_torchrun),
    ("env", _from_env_vars),
    ("local", _local),
)
"""Detectors in the order they are tried; the first that returns a ClusterEnv wins."""


def detect_cluster_env(environ: Optional[Environ] = None) -> ClusterEnv:
    """Describe this process's place in the job from ``environ`` (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    for _name, detector in DETECTORS:
        found = detector(environ)
        if found is not None:
            return found
    raise AssertionError("the local detector always matches")
