"""Where am I running? ``detect_cluster_env()`` answers from the launcher's variables.

Try it: ``python -c "from neural_arch.distributed.env import detect_cluster_env as d; print(d())"``
or ``neural-arch env``.

This is the only module that reads launcher environment variables. Each source has one
small detector below; they are tried in ``DETECTORS`` order and the first
that recognises its variables wins:

1. ``torchrun``   torchrun / torch elastic / our launcher (TORCHELASTIC_RUN_ID, RANK, ...)
2. ``openmpi``    mpirun of OpenMPI (OMPI_COMM_WORLD_*)
3. ``mpich``      MPICH / Intel MPI (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID) and MVAPICH
                  (MV2_COMM_WORLD_*)
4. ``slurm``      an ``srun`` step (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_NODELIST, ...)
5. ``lsf``        IBM LSF jsrun (JSM_NAMESPACE_*, LSB_*)
6. ``kubernetes`` a PyTorchJob or Indexed Job pod (KUBERNETES_SERVICE_HOST + RANK or
                  JOB_COMPLETION_INDEX, WORLD_SIZE, MASTER_ADDR)
7. ``env``        plain RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
8. ``local``      one process, world size 1

MPI comes before SLURM because ``mpirun`` inside an allocation starts its daemons with
srun, so its ranks inherit the daemon's SLURM_PROCID, not their own rank. An explicit
MASTER_ADDR / MASTER_PORT always overrides what a detector derived.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional

from neural_arch.distributed.hostlist import expand_hostlist

Environ = Mapping[str, str]

__all__ = ["ClusterEnv", "DETECTORS", "detect_cluster_env", "derived_port", "env_int", "expand_hostlist"]


@dataclass(frozen=True)
class ClusterEnv:
    """The process's place in the job, as the launcher or scheduler described it."""

    source: str
    """Which detector matched (see the module docstring for the list)."""
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
    """The scheduler's job id, when there is one."""
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


def _int(environ: Environ, key: str) -> int:
    value = env_int(environ, key)
    assert value is not None, key  # callers only ask for keys they checked are present
    return value


def _first(environ: Environ, *keys: str) -> Optional[str]:
    for key in keys:
        if environ.get(key):
            return environ[key]
    return None


def derived_port(job_key: str) -> int:
    """A port in 12000..31999 that every rank of one job derives alike from its job id.

    Below Linux's ephemeral range (32768+), so it does not collide with client sockets.
    """
    return 12000 + zlib.crc32(job_key.encode()) % 20000


def _master(environ: Environ, addr: Optional[str], port: Optional[int]) -> tuple[Optional[str], Optional[int]]:
    # An explicit MASTER_ADDR / MASTER_PORT always wins over what a detector derived.
    return environ.get("MASTER_ADDR") or addr, env_int(environ, "MASTER_PORT", port)


def _launcher_settings(environ: Environ) -> dict[str, object]:
    """What our launcher (or a job script) asks of init_process_group besides the ranks:
    NEURAL_ARCH_BACKEND, NEURAL_ARCH_TIMEOUT (seconds), NEURAL_ARCH_ATTEMPT."""
    raw_timeout = environ.get("NEURAL_ARCH_TIMEOUT")
    try:
        timeout = float(raw_timeout) if raw_timeout else None
    except ValueError:
        raise ValueError(f"environment variable NEURAL_ARCH_TIMEOUT={raw_timeout!r} is not a number of seconds.") from None
    attempt = environ.get("NEURAL_ARCH_ATTEMPT") or environ.get("TORCHELASTIC_RESTART_COUNT") or "0"
    return {"attempt": attempt, "backend": environ.get("NEURAL_ARCH_BACKEND") or None, "timeout": timeout}


def _rank_vars(source: str, environ: Environ) -> ClusterEnv:
    world = _int(environ, "WORLD_SIZE")
    local_world = env_int(environ, "LOCAL_WORLD_SIZE", world) or max(world, 1)
    return ClusterEnv(
        source=source,
        rank=_int(environ, "RANK"),
        world_size=world,
        local_rank=env_int(environ, "LOCAL_RANK", 0) or 0,
        local_world_size=local_world,
        node_rank=env_int(environ, "GROUP_RANK", 0) or 0,
        num_nodes=max(1, -(-world // local_world)),
        master_addr=environ.get("MASTER_ADDR") or None,
        master_port=env_int(environ, "MASTER_PORT"),
        job_id=environ.get("TORCHELASTIC_RUN_ID"),
    )


def _torchrun(environ: Environ) -> Optional[ClusterEnv]:
    # The elastic agent (torchrun, our launcher) always sets a run id or GROUP_RANK.
    if not ("TORCHELASTIC_RUN_ID" in environ or "GROUP_RANK" in environ):
        return None
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return _rank_vars("torchrun", environ)


def _same_node_master(source: str, environ: Environ, world: int, local_world: int, job_key: Optional[str]) -> tuple[Optional[str], Optional[int]]:
    """MPI launchers export no rendezvous address: on one node use loopback, and a port
    derived from the job (or, lacking one, from the shared parent launcher process)."""
    addr = "127.0.0.1" if local_world == world else None
    key = job_key or (f"ppid-{os.getppid()}" if local_world == world else None)
    addr, port = _master(environ, addr, derived_port(key) if key else None)
    if addr is None:
        raise ValueError(
            f"{source}: a multi-node MPI job does not say where rank 0 runs; export "
            "MASTER_ADDR=<first host> (and MASTER_PORT) to every rank, e.g. `mpirun -x MASTER_ADDR -x MASTER_PORT ...`."
        )
    return addr, port


def _openmpi(environ: Environ) -> Optional[ClusterEnv]:
    if "OMPI_COMM_WORLD_RANK" not in environ or "OMPI_COMM_WORLD_SIZE" not in environ:
        return None
    world = _int(environ, "OMPI_COMM_WORLD_SIZE")
    local_world = env_int(environ, "OMPI_COMM_WORLD_LOCAL_SIZE", 1) or 1
    job = _first(environ, "SLURM_JOB_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")
    addr, port = _same_node_master("openmpi", environ, world, local_world, job)
    return ClusterEnv(
        source="openmpi",
        rank=_int(environ, "OMPI_COMM_WORLD_RANK"),
        world_size=world,
        local_rank=env_int(environ, "OMPI_COMM_WORLD_LOCAL_RANK", 0) or 0,
        local_world_size=local_world,
        # OMPI_COMM_WORLD_NODE_RANK is a rank *within* the node, not the node's index.
        node_rank=_int(environ, "OMPI_COMM_WORLD_RANK") // local_world,
        num_nodes=-(-world // local_world),
        master_addr=addr,
        master_port=port,
        job_id=job,
    )


def _mpich(environ: Environ) -> Optional[ClusterEnv]:
    if "PMI_RANK" in environ and "PMI_SIZE" in environ:
        rank_key, size_key = "PMI_RANK", "PMI_SIZE"
        local_key, local_size_key = "MPI_LOCALRANKID", "MPI_LOCALNRANKS"
    elif "MV2_COMM_WORLD_RANK" in environ and "MV2_COMM_WORLD_SIZE" in environ:
        rank_key, size_key = "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"
        local_key, local_size_key = "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"
    else:
        return None
    world = _int(environ, size_key)
    local_world = env_int(environ, local_size_key, env_int(environ, "MPI_LOCALNRANKS", world)) or world
    job = _first(environ, "SLURM_JOB_ID", "PBS_JOBID", "PMI_KVSNAME", "PMIX_NAMESPACE")
    addr, port = _same_node_master("mpich", environ, world, local_world, job)
    return ClusterEnv(
        source="mpich",
        rank=_int(environ, rank_key),
        world_size=world,
        local_rank=env_int(environ, local_key, 0) or 0,
        local_world_size=local_world,
        num_nodes=-(-world // local_world),
        node_rank=_int(environ, rank_key) // local_world,
        master_addr=addr,
        master_port=port,
        job_id=job,
    )


def tasks_per_node(text: str) -> list[int]:
    """Expand SLURM_TASKS_PER_NODE (``"2(x3),1"`` -> ``[2, 2, 2, 1]``)."""
    counts: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "(x" in part:
                value, repeat = part.rstrip(")").split("(x")
                counts.extend([int(value)] * int(repeat))
            else:
                counts.append(int(part))
        except ValueError:
            raise ValueError(f"SLURM_TASKS_PER_NODE={text!r} is malformed; expected e.g. '2(x3),1'.") from None
    return counts


def _slurm(environ: Environ) -> Optional[ClusterEnv]:
    # Only inside an srun step: a batch script itself has SLURM_PROCID=0 and
    # SLURM_NTASKS=N too, but it is one process, not rank 0 of N.
    if "SLURM_PROCID" not in environ or not _first(environ, "SLURM_STEP_ID", "SLURM_STEPID"):
        return None
    world = env_int(environ, "SLURM_NTASKS", env_int(environ, "SLURM_NPROCS", 1)) or 1
    nodelist = _first(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    hosts = expand_hostlist(nodelist) if nodelist else []
    node = env_int(environ, "SLURM_NODEID", 0) or 0
    per_node = tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"]) if environ.get("SLURM_STEP_TASKS_PER_NODE") else (
        tasks_per_node(environ["SLURM_TASKS_PER_NODE"]) if environ.get("SLURM_TASKS_PER_NODE") else [world])
    local_world = per_node[node] if node < len(per_node) else per_node[-1]
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    addr, port = _master(environ, hosts[0] if hosts else None, derived_port(job) if job else None)
    return ClusterEnv(
        source="slurm",
        rank=_int(environ, "SLURM_PROCID"),
        world_size=world,
        local_rank=env_int(environ, "SLURM_LOCALID", 0) or 0,
        local_world_size=local_world,
        node_rank=node,
        num_nodes=env_int(environ, "SLURM_STEP_NUM_NODES", env_int(environ, "SLURM_NNODES", len(hosts) or 1)) or 1,
        master_addr=addr,
        master_port=port,
        job_id=job,
    )


def _lsf(environ: Environ) -> Optional[ClusterEnv]:
    if "JSM_NAMESPACE_RANK" not in environ or "JSM_NAMESPACE_SIZE" not in environ:
        return None
    # LSB_MCPU_HOSTS = "launch 1 node1 42 node2 42": the first entry is the launch node,
    # which runs no ranks when there are others.
    tokens = environ.get("LSB_MCPU_HOSTS", "").split()
    hosts = tokens[0::2]
    compute = hosts[1:] if len(hosts) > 1 else hosts
    job = environ.get("LSB_JOBID")
    addr, port = _master(environ, compute[0] if compute else None, derived_port(job) if job else None)
    world = _int(environ, "JSM_NAMESPACE_SIZE")
    local_world = env_int(environ, "JSM_NAMESPACE_LOCAL_SIZE", world) or world
    return ClusterEnv(
        source="lsf",
        rank=_int(environ, "JSM_NAMESPACE_RANK"),
        world_size=world,
        local_rank=env_int(environ, "JSM_NAMESPACE_LOCAL_RANK", 0) or 0,
        local_world_size=local_world,
        node_rank=_int(environ, "JSM_NAMESPACE_RANK") // local_world,
        num_nodes=len(compute) or 1,
        master_addr=addr,
        master_port=port,
        job_id=job,
    )


def _kubernetes(environ: Environ) -> Optional[ClusterEnv]:
    if "KUBERNETES_SERVICE_HOST" not in environ or "WORLD_SIZE" not in environ:
        return None
    if "RANK" in environ:  # PyTorchJob (Kubeflow training operator)
        return _rank_vars("kubernetes", environ)
    if "JOB_COMPLETION_INDEX" in environ:  # plain Indexed Job: the pod index is the rank
        world = _int(environ, "WORLD_SIZE")
        return ClusterEnv(
            source="kubernetes",
            rank=_int(environ, "JOB_COMPLETION_INDEX"),
            world_size=world,
            node_rank=_int(environ, "JOB_COMPLETION_INDEX"),
            num_nodes=world,
            master_addr=environ.get("MASTER_ADDR") or None,
            master_port=env_int(environ, "MASTER_PORT"),
        )
    return None


def _env(environ: Environ) -> Optional[ClusterEnv]:
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    return _rank_vars("env", environ)


def _local(environ: Environ) -> Optional[ClusterEnv]:
    addr, port = _master(environ, None, None)
    return ClusterEnv(source="local", rank=0, world_size=1, master_addr=addr, master_port=port)


Detector = Callable[[Environ], Optional[ClusterEnv]]

DETECTORS: tuple[tuple[str, Detector], ...] = (
    ("torchrun", _torchrun),
    ("openmpi", _openmpi),
    ("mpich", _mpich),
    ("slurm", _slurm),
    ("lsf", _lsf),
    ("kubernetes", _kubernetes),
    ("env", _env),
    ("local", _local),
)
"""Detectors in the order they are tried; the first that returns a ClusterEnv wins."""


def detect_cluster_env(environ: Optional[Environ] = None) -> ClusterEnv:
    """Describe this process's place in the job from ``environ`` (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    for _name, detector in DETECTORS:
        found = detector(environ)
        if found is not None:
            return replace(found, **_launcher_settings(environ))  # type: ignore[arg-type]
    raise AssertionError("the local detector always matches")
