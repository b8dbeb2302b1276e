"""Create and tear down the default process group; answer rank/world-size questions.

Run: ``python -c "import neural_arch.distributed as d; d.init_process_group(); print(d.get_distributed_info())"``
(world size 1 with no launcher). Under a launcher (``python -m neural_arch.distributed.launcher``,
``torchrun``, ...) the same call joins the job's world.

This is the only module that creates process groups. Every query works without one:
an uninitialised process is world size 1, rank 0.
"""

from __future__ import annotations

import atexit
import gc
import sys
import warnings
from datetime import timedelta
from typing import Any, Optional, Union

import torch
import torch.distributed as dist

from neural_arch.distributed.env import ClusterEnv, detect_cluster_env
from neural_arch.distributed.runtime import calls, desync
from neural_arch.distributed.runtime.gloo_threads import batch_gloo_io_threads
from neural_arch.distributed.runtime.guard import require_process_group
from neural_arch.distributed.runtime.heartbeat import explain_failed_teardown, start_heartbeat, stop_heartbeat

DEFAULT_TIMEOUT = timedelta(minutes=10)
"""How long a collective waits for a peer before failing (and naming it) instead of hanging."""

BACKENDS = ("gloo", "nccl")

Timeout = Union[timedelta, float, int]


def _as_timedelta(timeout: Timeout) -> timedelta:
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise ValueError(f"timeout={timeout!r} must be seconds (a number) or a datetime.timedelta.")
    if seconds <= 0:
        raise ValueError(f"timeout={timeout!r} must be positive; e.g. timeout=600 for ten minutes.")
    return timedelta(seconds=seconds)


def default_backend() -> str:
    """``nccl`` when CUDA and NCCL are usable, else ``gloo``."""
    if torch.cuda.is_available() and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def resolve_backend(backend: Optional[str]) -> str:
    """Validate a requested backend (``None``/``"auto"`` picks :func:`default_backend`)."""
    if backend is None or backend == "auto":
        return default_backend()
    name = str(backend).lower()
    if name not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not supported; use one of {BACKENDS} or None (auto).")
    if name == "nccl" and not (torch.cuda.is_available() and dist.is_nccl_available()):
        raise ValueError(
            "backend='nccl' needs CUDA GPUs and a CUDA build of PyTorch, and this process has "
            "none; use backend='gloo' (CPU) or backend=None to choose automatically."
        )
    return name


def init_process_group(
    backend: Optional[str] = None,
    init_method: str = "env://",
    world_size: Optional[int] = None,
    rank: Optional[int] = None,
    timeout: Optional[Timeout] = None,
) -> None:
    """Join (or create) the default process group; idempotent.

    Rank and world size default to what the launcher set (see ``neural_arch.distributed.env``).
    With world size 1 no launcher, port or environment variable is needed. A second call
    with compatible arguments does nothing; an incompatible one raises ``ValueError``.
    """
    if not dist.is_available():
        raise RuntimeError("this PyTorch build has no torch.distributed support.")
    cluster = detect_cluster_env()
    # Explicit arguments win over what the launcher asked for (--backend, --timeout).
    chosen = resolve_backend(backend if backend is not None else cluster.backend)
    if timeout is None:
        timeout = cluster.timeout if cluster.timeout is not None else DEFAULT_TIMEOUT
    pg_timeout = _as_timedelta(timeout)
    if dist.is_initialized():
        _check_compatible(backend, chosen, world_size, rank)
        return
    size, me = _validated_rank(
        cluster.world_size if world_size is None else int(world_size), cluster.rank if rank is None else int(rank)
    )
    device_id = _select_device(chosen, cluster.local_rank)
    # Why: a process that exits with a live gloo group while a peer still computes can
    # abort ("terminate called without an active exception"); leave politely at exit.
    atexit.unregister(_destroy_at_exit)
    atexit.register(_destroy_at_exit)
    if size == 1 and init_method == "env://":
        # Why: a world of one needs no rendezvous, so no port or MASTER_* variables either.
        dist.init_process_group(
            chosen, store=dist.HashStore(), rank=0, world_size=1, timeout=pg_timeout, device_id=device_id
        )
        return
    # Torch's flight recorder notes every collective (DDP's and FSDP's too) for the desync check
    # (desync/); turned on through torch's own variable, before the group exists.
    desync.enable_flight_recorder()
    since = desync.last_record_ids()  # older entries belong to an earlier group
    _join_world(cluster, chosen, init_method, size, me, pg_timeout, device_id)
    batch_gloo_io_threads()  # gloo's I/O thread must not preempt its worker (gloo_threads.py)
    calls.reset()  # every rank counts the script's collectives from here
    start_heartbeat(me, size, since=since)


def _validated_rank(size: int, rank: int) -> tuple[int, int]:
    if size < 1 or not 0 <= rank < size:
        raise ValueError(
            f"rank={rank} with world_size={size} is invalid: rank must be in 0..world_size-1 and world_size >= 1."
        )
    return size, rank


def _select_device(backend: str, local_rank: int) -> Optional[torch.device]:
    """NCCL binds each rank to one GPU (by local rank); gloo needs none."""
    if backend != "nccl":
        return None
    device_id = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device_id)
    return device_id


def _join_world(
    cluster: ClusterEnv,
    backend: str,
    init_method: str,
    size: int,
    rank: int,
    timeout: timedelta,
    device_id: Optional[torch.device],
) -> None:
    """Meet the other ranks of a world larger than one."""
    if init_method == "env://" and (cluster.master_addr is None or cluster.master_port is None):
        raise ValueError(
            f"rank {rank} of {size} ({cluster.source}): MASTER_ADDR and MASTER_PORT are not set, so "
            "the ranks cannot meet; start the script with `python -m neural_arch.distributed.launcher "
            "--nproc_per_node=N script.py` (or torchrun), or pass init_method='tcp://HOST:PORT'."
        )
    if init_method == "env://" and cluster.source == "torchrun":
        _init_under_elastic(backend, size, rank, timeout, device_id, cluster.job_id, cluster.attempt)
        return
    if init_method == "env://":
        # SLURM / MPI / LSF ranks have no MASTER_* variables for torch's env:// to read;
        # the detector derived the address, so meet there directly.
        init_method = f"tcp://{cluster.master_addr}:{cluster.master_port}"
    dist.init_process_group(
        backend, init_method=init_method, world_size=size, rank=rank, timeout=timeout, device_id=device_id
    )


def _init_under_elastic(
    backend: str,
    size: int,
    rank: int,
    timeout: timedelta,
    device_id: Optional[torch.device],
    run_id: Optional[str],
    attempt: str,
) -> None:
    """Join through the elastic agent's store, under keys unique to this attempt.

    Why: torchrun's agent keeps one store for the whole job, and gloo publishes each rank's
    listening address under the same keys in every attempt. After a restart a fast rank
    could read a dead worker's address and fail with "connectFullMesh ... Connection
    refused" or hang (a frequent end of plain torchrun restarts). A per-attempt
    prefix makes stale keys invisible.
    """
    store, _, _ = next(dist.rendezvous("env://", rank, size, timeout=timeout))
    prefixed = dist.PrefixStore(f"neural_arch/{run_id}/attempt-{attempt}", store)
    dist.init_process_group(backend, store=prefixed, world_size=size, rank=rank, timeout=timeout, device_id=device_id)


def _check_compatible(requested: Optional[str], chosen: str, world_size: Optional[int], rank: Optional[int]) -> None:
    current = dist.get_backend()
    if requested not in (None, "auto") and chosen != current:
        raise ValueError(
            f"the process group is already initialised with backend {current!r}; "
            f"cannot switch to {chosen!r}. Call destroy_process_group() first."
        )
    if world_size is not None and int(world_size) != dist.get_world_size():
        raise ValueError(
            f"the process group is already initialised with world size {dist.get_world_size()}, "
            f"not {world_size}; call destroy_process_group() first."
        )
    if rank is not None and int(rank) != dist.get_rank():
        raise ValueError(
            f"the process group is already initialised as rank {dist.get_rank()}, not {rank}; "
            "call destroy_process_group() first."
        )


def destroy_process_group() -> None:
    """Leave the default process group; safe to call twice or without one.

    Ranks first wait at a barrier for peers that are still computing: with gloo, a rank
    that tears down its connections while a peer is mid-work can make that peer abort
    ("terminate called without an active exception"). A dead peer makes the barrier fail
    quickly; we then warn and tear down anyway rather than raise during shutdown.
    """
    if not dist.is_initialized():
        return
    if dist.get_world_size() > 1:
        try:
            with calls.leaving():
                dist.barrier()  # before stopping our heartbeat: a slow peer may still need it
        except Exception as exc:  # noqa: BLE001 - shutdown must not raise over a dead peer
            warnings.warn(
                f"rank {dist.get_rank()}: barrier before destroy_process_group failed "
                f"({str(exc).strip().splitlines()[0]}); {explain_failed_teardown()}. Tearing down anyway.",
                RuntimeWarning,
                stacklevel=2,
            )
    abandon_process_group()


def abandon_process_group() -> None:
    """Leave at once, without the barrier: for a process that is failing, whose healthy
    peers would otherwise wait for it until the timeout (delaying the launcher's restart)."""
    if dist.is_initialized():
        stop_heartbeat()
        # Why collect: a DDP model in a garbage reference cycle still holds the group. Left
        # for process exit, gloo's threads are torn down during C++ static destruction and
        # the rank aborts ("terminate called without an active exception"; 3 in 20 mpirun
        # runs of the trainer). Collected now, the group is released right here.
        gc.collect()
        dist.destroy_process_group()


def _destroy_at_exit() -> None:
    if getattr(sys, "last_value", None) is not None:  # dying of an uncaught exception
        abandon_process_group()
    else:
        destroy_process_group()


def is_initialized() -> bool:
    """True when this process has joined a process group."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """Global rank (0 when no process group is initialised)."""
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    """Number of processes (1 when no process group is initialised)."""
    return dist.get_world_size() if is_initialized() else 1


def get_local_rank() -> int:
    """Rank on this node, as the launcher set it (0 without a launcher)."""
    return detect_cluster_env().local_rank


def get_backend() -> Optional[str]:
    """The process group's backend name, or None without one."""
    return dist.get_backend() if is_initialized() else None


@calls.counted("barrier")
def barrier() -> None:
    """Wait until every rank arrives (no-op at world size 1)."""
    require_process_group("barrier")
    if get_world_size() > 1:
        dist.barrier()


def get_distributed_info() -> dict[str, Any]:
    """A plain dict describing this process's distributed state, for logs and bug reports."""
    cluster = detect_cluster_env()
    return {
        "available": dist.is_available(),
        "initialized": is_initialized(),
        "world_size": get_world_size(),
        "rank": get_rank(),
        "local_rank": cluster.local_rank,
        "local_world_size": cluster.local_world_size,
        "node_rank": cluster.node_rank,
        "backend": get_backend(),
        "cluster": cluster.source,
        "master_addr": cluster.master_addr,
        "master_port": cluster.master_port,
        "cuda_available": torch.cuda.is_available(),
        "torch_version": torch.__version__,
    }
