"""The answer to "where am I running?": the ``ClusterEnv`` record, and the helpers every
detector in this package uses to read launcher variables.

Try it: ``python -c "from neural_arch.distributed.env.record import derived_port; print(derived_port('1234'))"``
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Mapping, Optional

Environ = Mapping[str, str]


@dataclass(frozen=True)
class ClusterEnv:
    """The process's place in the job, as the launcher or scheduler described it."""

    source: str
    """Which detector matched (see ``detect.py`` for the list and its order)."""
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
    num_nodes: int = 1
    """Number of nodes in the job."""
    master_addr: Optional[str] = None
    """Host of the rendezvous store (rank 0's node), if known."""
    master_port: Optional[int] = None
    """Port of the rendezvous store, if known (given, or derived from the job id)."""
    job_id: Optional[str] = None
    """The job id of whoever started this process, when there is one (torchrun's run id)."""
    evidence: Optional[str] = None
    """The variable that says how many processes the job has, as ``NAME=value`` (for messages)."""
    started_by: Optional[str] = None
    """Who started this process, in words (``srun``, ``OpenMPI's mpirun``, ...)."""
    scheduler: Optional[str] = None
    """The batch scheduler whose job this process runs in (``slurm``, ``lsf``, ``pbs``, ``flux``,
    ``skypilot``), also under a launcher that job started; None outside one."""
    scheduler_job_id: Optional[str] = None
    """That scheduler's job id (what ``scontrol requeue`` takes on SLURM)."""
    attempt: str = "0"
    """Which start of the worker group this is (changes on every launcher restart)."""
    backend: Optional[str] = None
    """Backend the launcher asked for (``--backend``), if any."""
    timeout: Optional[float] = None
    """Collective timeout in seconds the launcher asked for (``--timeout``), if any."""

    def __post_init__(self) -> None:
        where = f"{self.source} environment"
        if self.world_size < 1:
            raise ValueError(f"{where}: world size {self.world_size} must be >= 1; check the process count.")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"{where}: rank {self.rank} is outside 0..{self.world_size - 1} "
                f"(world size {self.world_size}); the rank must be smaller than the world size."
            )
        if self.local_world_size < 1 or not 0 <= self.local_rank < self.local_world_size:
            raise ValueError(
                f"{where}: local rank {self.local_rank} is outside 0..{self.local_world_size - 1}; "
                "the local rank must be smaller than the number of processes on the node."
            )
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise ValueError(f"{where}: master port {self.master_port} is not a TCP port (1..65535).")


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


def require_int(environ: Environ, key: str) -> int:
    """``env_int`` for a variable the caller has checked is present."""
    value = env_int(environ, key)
    assert value is not None, key  # callers only ask for keys they checked are present
    return value


def first_set(environ: Environ, *keys: str) -> Optional[str]:
    """The value of the first of ``keys`` that is set and non-empty."""
    for key in keys:
        if environ.get(key):
            return environ[key]
    return None


def said(environ: Environ, *keys: str) -> Optional[str]:
    """``NAME=value`` of the first of ``keys`` that is set: the evidence a detector records."""
    key = next((k for k in keys if environ.get(k)), None)
    return f"{key}={environ[key]}" if key else None


def derived_port(job_key: str) -> int:
    """A port in 12000..31999 that every rank of one job derives alike from its job id.

    Below Linux's ephemeral range (32768+), so it does not collide with client sockets.
    """
    return 12000 + zlib.crc32(job_key.encode()) % 20000


def with_master_override(
    environ: Environ, addr: Optional[str], port: Optional[int]
) -> tuple[Optional[str], Optional[int]]:
    """The rendezvous address: an explicit MASTER_ADDR / MASTER_PORT always wins over
    what a detector derived."""
    return environ.get("MASTER_ADDR") or addr, env_int(environ, "MASTER_PORT", port)


def launcher_settings(environ: Environ) -> dict[str, object]:
    """What our launcher (or a job script) asks of init_process_group besides the ranks:
    NEURAL_ARCH_BACKEND, NEURAL_ARCH_TIMEOUT (seconds), NEURAL_ARCH_ATTEMPT."""
    raw_timeout = environ.get("NEURAL_ARCH_TIMEOUT")
    try:
        timeout = float(raw_timeout) if raw_timeout else None
    except ValueError:
        raise ValueError(
            f"environment variable NEURAL_ARCH_TIMEOUT={raw_timeout!r} is not a number of seconds."
        ) from None
    attempt = environ.get("NEURAL_ARCH_ATTEMPT") or environ.get("TORCHELASTIC_RESTART_COUNT") or "0"
    return {"attempt": attempt, "backend": environ.get("NEURAL_ARCH_BACKEND") or None, "timeout": timeout}
