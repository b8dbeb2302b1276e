"""The elastic agent behind our launcher: torch's ``LocalElasticAgent`` with robust restarts.

Used by ``DistributedLauncher`` (launch.py); not run directly.

torch.distributed.elastic supervises the workers (start, monitor, restart, rendezvous);
this subclass changes these things, each for a restart that otherwise fails:

1. **A fresh worker store per attempt.** torchrun's agent keeps one TCPStore for the whole
   job; gloo publishes every rank's listening address under the same keys each attempt, so
   a restarted rank could read a dead worker's address ("connectFullMesh failed ...
   Connection refused", or a hang; benchmarks/recovery/ counts how often). Node 0's agent
   starts a new store on a free port for every worker group, and every attempt gets a
   unique id (``NEURAL_ARCH_ATTEMPT``) that init_process_group also uses as a key prefix.
2. **Old workers fully gone.** After torch stops a group, any process left in the old
   workers' process groups (data loader workers, subprocesses) is SIGKILLed before the
   next attempt starts.
3. **Every attempt's failures are kept**, so the final summary names the rank that
   started the trouble, not just the last attempt's casualties.
4. **No restart that undoes a stop**: a worker that says it stopped on purpose after saving
   (neural-arch's trainer does, on SIGINT/SIGTERM/SIGUSR1, through the launcher's channel:
   ``channel.py``); SIGUSR1 sent to the launcher (SLURM's time-limit warning) is passed on to
   the workers. Nor after an exit with code 2 that the worker says is a usage or
   configuration error (e.g. a run directory another job holds). A script's own exit codes,
   130, 143 or 2 included, are failures restarted as torchrun restarts them.
5. **No restart that cannot help**: when a rank fails with the same Python exception at
   the same place as in the previous attempt, or every rank does on the first attempt, and
   no checkpoint was saved in between, the remaining restarts are dropped
   (``restart_policy.py``; single-node jobs only, since the agents of other nodes could not
   learn of it and would wait in the next rendezvous). A restart it does make is announced
   in one line (``blame.restart_notice``), unless the rendezvous is gone (rendezvous_probe.py).
6. **A stopped worker does not delay the end**: once a worker fails, the others are sent
   SIGCONT before torch's SIGTERM, which a SIGSTOPped process would hold for torch's 30 s
   grace period (``stopping.py``).
7. **A torn error file is set aside**, not a crash of the launcher: a worker SIGTERMed
   while writing its elastic error file leaves it cut off (seen once in CI, in a
   kill-during-checkpoint test), and torch's agent died parsing it.
8. **With a job token, the workers' store is gated** (``gate.py``): node 0's fresh store sits
   on loopback behind a gate on its master address, and every node's workers reach it
   through a forwarder of their own agent that proves the token on each connection.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import torch.distributed as dist
from torch.distributed.elastic.agent.server.api import RunResult, WorkerGroup, WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

from neural_arch.distributed.launcher.blame import restart_notice
from neural_arch.distributed.launcher.channel import PROGRESS, STACKS, STOP, USAGE, forget, heard
from neural_arch.distributed.launcher.gate import Forwarder, Gate, forwarded
from neural_arch.distributed.launcher.job_token import JobToken
from neural_arch.distributed.launcher.listen import LOOPBACK, serving_store
from neural_arch.distributed.launcher.log_format import attempt_id
from neural_arch.distributed.launcher.records import FailureRecord
from neural_arch.distributed.launcher.rendezvous_probe import raise_if_rendezvous_lost
from neural_arch.distributed.launcher.restart_policy import (
    failed_alike,
    repeated_failure,
    step_of,
    stopped_on_request,
    usage_error,
)
from neural_arch.distributed.launcher.stopping import live_members, waking_first
from neural_arch.distributed.launcher.torn_files import set_aside_torn
from neural_arch.distributed.launcher.warm import WarmPool

__all__ = ["FailureRecord", "RobustElasticAgent"]


class RobustElasticAgent(LocalElasticAgent):
    """LocalElasticAgent with a fresh store per attempt, thorough stops and failure history."""

    def __init__(
        self,
        *args: Any,
        log_dir: Optional[Path] = None,
        stop_repeated_failures: bool = False,
        job_token: Optional[JobToken] = None,
        warm_spares: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.warm_pool = WarmPool(warm_spares, os.getpid()) if warm_spares > 0 else None  # warm.py
        self._fresh_store: Optional[dist.TCPStore] = None
        self._token = job_token
        self._gate: Optional[Gate] = None
        self._forwarder: Optional[Forwarder] = None
        self._attempts = 0
        self._attempt_id = ""
        self._log_dir = log_dir
        self._stop_repeated = stop_repeated_failures
        self.failure_history: list[FailureRecord] = []
        self._killed: set[int] = set()  # workers the launcher SIGKILLed after another one crashed
        self.gave_up: Optional[str] = None
        """Why restarts stopped before max_restarts (see restart_policy.py), if they did."""
        self.stopped_by: Optional[int] = None
        """The signal the workers stopped on purpose for (saved, then exited 128 + it), if they did."""

    def _rendezvous(self, worker_group: WorkerGroup) -> None:
        super()._rendezvous(worker_group)
        self._attempts += 1
        handler = worker_group.spec.rdzv_handler
        # A dynamic rendezvous store is already prefixed per round; the static one is shared
        # by all attempts (whose count all agents agree on, since they restart together).
        key = "neural_arch/attempt" + (f"/{self._attempts}" if handler.get_backend() == "static" else "")
        if handler.get_backend() == "static" and worker_group.group_world_size > 1:
            self._await_every_node(worker_group.group_world_size)
        if worker_group.group_rank == 0:
            port = worker_group.master_port
            if handler.use_agent_store:
                self._fresh_store = None  # the previous attempt's server, and its stale keys, go away
                self.close_gates()
                # On the workers' master address only, not on every interface (listen.py);
                # with a token on loopback, behind a gate on that address.
                self._fresh_store = serving_store(
                    LOOPBACK if self._token else worker_group.master_addr, 0, timedelta(seconds=300)
                )
                port = self._fresh_store.port
                if self._token is not None:
                    self._gate = Gate(worker_group.master_addr, 0, port, self._token)
                    port = self._gate.port
            self._store.set(key, f"{worker_group.master_addr} {port} {self._attempts} {uuid.uuid4().hex[:12]}")
        # Every agent takes node 0's: its workers' store address, and the attempt's number and
        # id (a node that joined later counted fewer rendezvous; one that was node 0 before
        # still holds the address from its own first rendezvous).
        addr, port_text, count, unique = self._store.get(key).decode().split()
        worker_group.master_addr, worker_group.master_port, self._attempts = addr, int(port_text), int(count)
        if self._token is not None:
            if self._forwarder is not None:
                self._forwarder.close()
            worker_group.master_addr, worker_group.master_port, self._forwarder = forwarded(
                addr, int(port_text), self._token, 300
            )
        # Workers inherit the agent's environment: this names the attempt for their keys.
        self._attempt_id = attempt_id(int(count), unique)
        os.environ["NEURAL_ARCH_ATTEMPT"] = self._attempt_id

    def _await_every_node(self, nodes: int) -> None:
        """Static rendezvous: return once every node's agent has reached this attempt (or raise
        after the store's timeout, ``--start_timeout``). torch's rank assignment reads each
        node's record under the same keys every attempt, so on a restart node 0 read the
        previous attempt's records and started its workers alone: a node cut off by a network
        partition then lost the job its restarts, its workers failing at init after the
        collective timeout, before the link was back."""
        arrived = f"neural_arch/arrived/{self._attempts}"
        if self._store.add(arrived, 1) == nodes:
            self._store.set(f"{arrived}/all", "1")
        self._store.wait([f"{arrived}/all"])

    def close_gates(self) -> None:
        """Close the gate or forwarder of the workers' store (the launcher does when the job ends)."""
        for door in (self._gate, self._forwarder):
            if door is not None:
                door.close()
        self._gate = self._forwarder = None

    def _stop_workers(self, worker_group: WorkerGroup) -> None:
        pgids = list(self._pcontext.pids().values()) if self._pcontext else []
        super()._stop_workers(worker_group)
        deadline = time.monotonic() + 10
        for pgid in pgids:  # workers lead their own process groups
            while time.monotonic() < deadline and live_members(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.02)

    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: Optional[int] = None) -> None:
        # torch's _stop_workers (each restart) calls _shutdown() bare, i.e. its 30 s: ours is --shutdown-timeout.
        super()._shutdown(death_sig, self._shutdown_timeout if timeout is None else timeout)
        # The attempt is over and its failures recorded: its workers' messages go (channel.py).
        for error_file in self._pcontext.error_files.values() if self._pcontext else ():
            forget(error_file)

    def _start_workers(self, worker_group: WorkerGroup) -> dict[int, Any]:
        with self.warm_pool.serving() if self.warm_pool else contextlib.nullcontext():
            pids = super()._start_workers(worker_group)
        if self._pcontext is not None:
            self._pcontext.close = waking_first(
                self._pcontext.close, self._pcontext.pids, self._crashed, self._writes_stacks, self._failed
            )
        return pids

    def _heard(self, local_rank: int, name: str, pid: Optional[int]) -> Optional[str]:
        """Message ``name`` from this attempt's worker ``local_rank`` (process ``pid``), if it left it (channel.py)."""
        error_files = self._pcontext.error_files if self._pcontext else {}
        return heard(error_files[local_rank], name, pid) if local_rank in error_files else None

    def _writes_stacks(self, local_rank: int, pid: int) -> bool:
        return self._heard(local_rank, STACKS, pid) is not None

    def _progressed(self) -> Optional[str]:
        """The name of the last checkpoint a worker of this attempt said it saved, or None."""
        error_files = self._pcontext.error_files if self._pcontext else {}
        saved = [text for rank in error_files if (text := self._heard(rank, PROGRESS, None)) is not None]
        return saved[-1] if saved else None

    def _crashed(self) -> bool:
        """Whether a worker of this attempt has ended by failing (an error exit or a fatal signal),
        not by stopping on request (it said so after saving: channel.py) or finishing; if so,
        the ones still running are remembered as stopped by the launcher (the summary says so)."""
        if not self._failed():
            return False
        self._killed.update(pid for pid, (_, code) in self._codes().items() if code is None)  # about to be killed
        return True

    def _codes(self) -> dict[int, tuple[int, Optional[int]]]:
        handlers = getattr(self._pcontext, "subprocess_handlers", None) or {}
        return {handler.proc.pid: (rank, handler.proc.poll()) for rank, handler in handlers.items()}

    def _failed(self) -> bool:
        """Whether a worker of this attempt has failed (``_crashed`` without its record)."""
        codes = self._codes().items()
        return any(code not in (None, 0) and self._heard(rank, STOP, pid) is None for pid, (rank, code) in codes)

    def _stop_signal(self, local_rank: int, pid: int) -> Optional[int]:
        said = self._heard(local_rank, STOP, pid)
        return int(said) if said is not None and said.isdigit() else None

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        if self.warm_pool is not None:  # from this thread: a spare's parent-death signal follows it
            self.warm_pool.refill_if_due()
        try:
            result = super()._monitor_workers(worker_group)
        except ValueError:  # json.JSONDecodeError: see _set_aside_torn_error_files
            if not self._set_aside_torn_error_files():
                raise
            result = super()._monitor_workers(worker_group)  # torch's poll resumes where it stopped
        if result.state == WorkerState.FAILED:
            for rank, failure in result.failures.items():
                self.failure_history.append(
                    FailureRecord(
                        attempt=self._attempts - 1,
                        rank=rank,
                        local_rank=failure.local_rank,
                        pid=failure.pid,
                        exitcode=failure.exitcode,
                        signal=failure.signal_name() if failure.exitcode < 0 else None,
                        message=failure.message,
                        timestamp=failure.timestamp,
                        stopped_by_launcher=failure.pid in self._killed,
                        stop_signal=self._stop_signal(failure.local_rank, failure.pid),
                        usage_error=self._heard(failure.local_rank, USAGE, failure.pid),
                    )
                )
            self._apply_restart_policy()
            if self._remaining_restarts > 0:
                raise_if_rendezvous_lost(worker_group)  # node 0 gone: that one line, not a restart's
                self._announce_restart()
        return result

    def _announce_restart(self) -> None:
        """One line on the launcher's stderr for an attempt that failed and will be restarted."""
        records = [r for r in self.failure_history if r.attempt == self._attempts - 1]
        saved = step_of(self._progressed())
        attempts = self._worker_group.spec.max_restarts + 1
        line = restart_notice(records, socket.gethostname(), saved, self._attempts + 1, attempts)
        print(line, file=sys.stderr, flush=True)

    def _set_aside_torn_error_files(self) -> bool:
        return set_aside_torn(self._pcontext.error_files.values() if self._pcontext else ())

    def forward_signal(self, signum: int) -> None:
        """Send ``signum`` to every worker of the running attempt (e.g. SLURM's USR1 warning)."""
        for pid in self._pcontext.pids().values() if self._pcontext else ():
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass  # already gone

    def _apply_restart_policy(self) -> None:
        self.stopped_by = stopped_on_request(self.failure_history, self._attempts - 1)
        if self.stopped_by is not None:
            self._remaining_restarts = 0  # the stop was asked for: a restart would undo it
            return
        refused = usage_error(self.failure_history, self._attempts - 1)
        if refused is not None and self._remaining_restarts > 0:
            self.gave_up, self._remaining_restarts = refused, 0
            return
        if not self._stop_repeated or self._remaining_restarts == 0:
            return
        progressed = self._progressed() is not None
        reason = repeated_failure(self.failure_history, self._attempts - 1, progressed) or failed_alike(
            self.failure_history, self._attempts - 1, self._worker_group.spec.local_world_size, progressed
        )
        if reason is not None:
            self.gave_up = reason
            self._remaining_restarts = 0  # torch's run loop then stops the group and reports failure
