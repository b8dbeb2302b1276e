"""Warm spares: worker processes started before a restart needs them, with torch already imported.

Use: ``neural-arch launch --warm-spares ...`` (``LaunchConfig.warm_spares``); the agent
(agent.py) does::

    pool = WarmPool(size=nproc, parent_pid=os.getpid())
    with pool.serving():                # torch elastic's next group start takes spares
        super()._start_workers(group)
    pool.refill_if_due()                # each monitor pass: the next restart's spares, REFILL_DELAY s after a start
    pool.close()                        # at the job's end

Why: a restart after a failure is mostly the replacement workers' start-up (benchmarks/recovery:
of 6.3 s under load, 5.1 s is ``import torch``). torch elastic restarts every worker of the node,
so the pool holds one spare per local rank: ``python -u worker.py --warm-spare FD PID``, a worker
that imported torch and waits on a pipe. Starting a group, torch elastic builds one
``SubprocessHandler`` per rank, whose ``_popen`` starts ``python -u worker.py ...``; ours
(``WarmHandler``) instead writes that command line and environment into a spare's pipe, and the
spare runs it (``spare.wait_for_work``, then ``worker.main``), so torch elastic supervises, signals and reaps the
same kind of process it would have started: the spare was started the same way (its own session,
the launcher's streams) by the same thread (its parent-death signal, lifeline.py).

When a spare is not used (a cold start instead): the command is not the worker file's (``--no-python``),
torch elastic redirects the streams to files (``--redirects``), the spare has exited, or the
environment differs from the one the spare started with in anything but the per-attempt
variables (``PER_ATTEMPT``): what the interpreter or torch's libraries read as they load
(``OMP_NUM_THREADS``, ``LD_PRELOAD``, ``PYTHON*``) must have been what a cold start reads.

What it costs: ``size`` idle interpreters with torch imported (about 300 MB resident each on a
CPU build, most of it shared library pages), and their imports' CPU time, taken ``REFILL_DELAY``
seconds after a group starts so that they do not slow its first steps. What a script sees that a
cold start would not: torch (and what it imports) already in ``sys.modules``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from torch.distributed.elastic.multiprocessing import api as elastic_api
from torch.distributed.elastic.multiprocessing.subprocess_handler.subprocess_handler import SubprocessHandler

from neural_arch.distributed.launcher.worker import WORKER

PER_ATTEMPT = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_NAME",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "CUDA_VISIBLE_DEVICES",
    }
)
"""Variables torch elastic sets per worker and attempt: read when the script starts its process
group or device, long after torch's import, so a spare may take them late."""
PER_ATTEMPT_PREFIXES = ("TORCHELASTIC_", "NEURAL_ARCH_")
"""torch elastic's own (error file, restart count, run id) and ours (the attempt id): read by
Python code at run time, never by an import."""
REFILL_DELAY = 10.0
"""Seconds after a group starts before the next spares start (their imports would compete with
the group's first steps for the CPU)."""


@dataclass
class Spare:
    """One waiting worker: its process, the pipe its assignment goes into, the environment it has."""

    proc: subprocess.Popen
    pipe: int
    env: dict[str, str]


def differs_late(started: dict[str, str], wanted: dict[str, str]) -> list[str]:
    """Variables whose value a spare started with ``started`` would get wrong under ``wanted``:
    every difference that is not a per-attempt variable (empty: the spare may take the work)."""
    keys = set(started) | set(wanted)
    return sorted(
        k
        for k in keys
        if started.get(k) != wanted.get(k) and k not in PER_ATTEMPT and not k.startswith(PER_ATTEMPT_PREFIXES)
    )


class WarmPool:
    """Up to ``size`` spare workers of this launcher (``parent_pid``), handed out at group starts."""

    def __init__(self, size: int, parent_pid: int, python: str = sys.executable) -> None:
        self.size = size
        self.parent_pid = parent_pid
        self.python = python
        self.spares: list[Spare] = []
        self.taken = 0
        """Group members started from a spare so far."""
        self.cold = 0
        """Group members started cold while the pool was serving (with ``taken``: whether a group started yet)."""
        self.refill_at: Optional[float] = None

    def command(self, pipe: int) -> list[str]:
        return [self.python, "-u", WORKER, "--warm-spare", str(pipe), str(self.parent_pid)]

    def fill(self) -> None:
        """Start spares until ``size`` are alive (each imports torch, seconds of CPU)."""
        for spare in [s for s in self.spares if s.proc.poll() is not None]:
            self.spares.remove(spare)
            self._drop(spare)
        while len(self.spares) < self.size:
            read, write = os.pipe()
            env = dict(os.environ)
            try:
                # As torch elastic starts a worker: its own session, the launcher's streams.
                proc = subprocess.Popen(self.command(read), env=env, pass_fds=(read,), start_new_session=True)
            finally:
                os.close(read)
            self.spares.append(Spare(proc, write, env))
        self.refill_at = None

    def refill_if_due(self) -> None:
        if self.refill_at is not None and time.monotonic() >= self.refill_at:
            self.fill()

    def take(self, args: tuple, env: dict[str, str]) -> Optional[subprocess.Popen]:
        """A spare now running ``args`` under ``env``, or None (start it cold)."""
        if list(args[:3]) != [self.python, "-u", WORKER]:
            return None
        while self.spares:
            spare = self.spares.pop(0)
            if spare.proc.poll() is not None or differs_late(spare.env, env):
                self._drop(spare)
                continue
            try:
                os.write(spare.pipe, json.dumps({"args": list(args), "env": env}).encode())
            except OSError:  # it died since the poll
                self._drop(spare)
                continue
            os.close(spare.pipe)
            self.taken += 1
            return spare.proc
        return None

    def _drop(self, spare: Spare) -> None:
        with contextlib.suppress(OSError):
            os.close(spare.pipe)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(spare.proc.pid, signal.SIGKILL)
        spare.proc.wait()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """While the block runs, torch elastic's group start takes spares (``WarmHandler``); then
        the next spares are due ``REFILL_DELAY`` seconds later."""
        if self.taken == self.cold == 0:  # the first group too starts from spares, which cost it nothing more
            self.fill()
        before = elastic_api.get_subprocess_handler
        elastic_api.get_subprocess_handler = self.handler  # type: ignore[assignment]
        try:
            yield
        finally:
            elastic_api.get_subprocess_handler = before  # type: ignore[assignment]
            self.refill_at = time.monotonic() + REFILL_DELAY

    def handler(self, *args: Any, **kwargs: Any) -> SubprocessHandler:
        """``get_subprocess_handler``'s signature (entrypoint, args, env, stdout, stderr, local_rank_id, ...)."""
        return WarmHandler(self, *args, **kwargs)

    def close(self) -> None:
        """Stop every spare still waiting (the job is over)."""
        for spare in self.spares:
            self._drop(spare)
        self.spares = []


class WarmHandler(SubprocessHandler):
    """torch elastic's handler of one worker process, started from a spare where one fits."""

    def __init__(self, pool: WarmPool, *args: Any, **kwargs: Any) -> None:
        self._pool = pool  # before the base class's __init__, which calls _popen
        super().__init__(*args, **kwargs)

    def _popen(self, args: tuple, env: dict[str, str]) -> subprocess.Popen:
        if self._stdout is None and self._stderr is None:  # the launcher's streams, as the spares have
            proc = self._pool.take(args, env)
            if proc is not None:
                return proc
        self._pool.cold += 1
        return super()._popen(args, env)
