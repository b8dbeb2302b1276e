"""Start a distributed job: N workers per node, restarted as a group when one fails.

Run: ``python -m neural_arch.distributed.launcher --nproc_per_node=2 train.py --lr 0.1``
(or ``neural-arch launch``; as torchrun, everything after the script is the script's).
Python: ``DistributedLauncher(LaunchConfig(nproc_per_node=2)).launch("train.py", "--lr", "0.1")``.

Built on torch.distributed.elastic (agent, rendezvous, restarts; see agent.py for what we
change). Workers see exactly torchrun's variables, so torchrun/Fabric/Accelerate scripts
run unmodified. One node without ``--master_port`` gets a free port from the OS (two jobs
never collide); ``--nnodes=MIN:MAX`` is an elastic job over a c10d rendezvous.

Exposure and lifetime (docs/security.md): every store listens on one address (loopback
for one node; see listen.py, rendezvous.py), a multi-node job admits only nodes with its
job token (job_token.py), workers die with the launcher (lifeline.py) and the launcher's
temporary directory goes with it (scratch.py). The node's snapshot keeper (keeper.py) lives as
long as the launcher, on loopback behind a token.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import traceback
import uuid
from pathlib import Path
from typing import Optional, Sequence

from torch.distributed.elastic.agent.server.api import WorkerSpec
from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.rendezvous import RendezvousError, RendezvousTimeoutError

from neural_arch.distributed.env.torchrun_options import line_prefix_template
from neural_arch.distributed.env.worker_output import OUTPUT_VARIABLE
from neural_arch.distributed.launcher import cpu_bind
from neural_arch.distributed.launcher import torchrun_compat as compat
from neural_arch.distributed.launcher.agent import RobustElasticAgent
from neural_arch.distributed.launcher.args import PROG, LaunchUsageError, misplaced_options, parse_launch_args
from neural_arch.distributed.launcher.config import LaunchConfig, config_from_args
from neural_arch.distributed.launcher.job_token import TOKEN_ENV, ForeignJobError, JobToken, resolve_job_token
from neural_arch.distributed.launcher.keeper import leaving_keeper_files, node_keeper
from neural_arch.distributed.launcher.listen import check_port_free, is_local, loopback_interface
from neural_arch.distributed.launcher.log_format import clear_progress_markers
from neural_arch.distributed.launcher.outcome import failed_job_exit
from neural_arch.distributed.launcher.program import check_program
from neural_arch.distributed.launcher.rendezvous import (
    C10D_READ_TIMEOUT,
    RendezvousUnreachable,
    quiet_store_warnings,
    rendezvous_handler,
    rendezvous_parameters,
)
from neural_arch.distributed.launcher.scratch import ScratchDir
from neural_arch.distributed.launcher.torch_logs import torch_elastic_logs
from neural_arch.distributed.launcher.worker import WORKER


class DistributedLauncher:
    """Launch a script on this node's workers; ``launch()`` returns the job's exit code."""

    def __init__(self, config: LaunchConfig) -> None:
        self.config = config
        self._token: Optional[JobToken] = None

    def _worker_args(self, script: str, args: Sequence[str], log_dir: Path, shown_dir: Path) -> tuple[str, ...]:
        c = self.config
        shown = () if c.console_local_ranks is None else ("--local-ranks", ",".join(map(str, c.console_local_ranks)))
        cpus = cpu_bind.plan_binding(
            c.cpu_bind, c.nproc, {**os.environ, **self._worker_environment()}, loader_workers=c.loader_workers
        )
        bound = () if cpus is None else ("--bind-cpus", cpu_bind.format_cpus(cpus))
        # --parent-pid: this process starts the workers (torch elastic's agent runs in it); they die with it.
        return (
            "-u",
            WORKER,
            "--console",
            "rank0" if c.rank0_only else "all",
            *shown,
            *bound,
            "--run-as",
            c.run_as,
            "--log-dir",
            str(log_dir),
            "--parent-pid",
            str(os.getpid()),
            "--shown-dir",
            str(shown_dir),
            script,
            *args,
        )

    def preflight(self, script: str) -> None:
        """Fail fast on what can be checked before starting anything (ValueError / RuntimeError)."""
        c = self.config
        check_program(script, c.run_as)
        if c.log_dir is not None and Path(c.log_dir).exists() and not Path(c.log_dir).is_dir():
            raise ValueError(f"--log-dir={c.log_dir!r} is a file, not a directory; name a directory.")
        if c.c10d and c.node_rank != 0:  # torchrun's warning, in its words
            print(
                f"launcher: warning: node_rank is only used for static rdzv_backend. It will be ignored for "
                f"rdzv_backend=c10d (--node-rank={c.node_rank}; the rendezvous assigns node ranks).",
                file=sys.stderr,
                flush=True,
            )
        self._token = self._job_token()  # a token file that cannot be read is a usage error
        static = c.min_nodes == c.max_nodes and c.rdzv_backend != "c10d"  # c10d: whichever node binds first hosts
        if c.master_port is not None and c.node_rank == 0 and static and is_local(c.master_addr):
            check_port_free(c.master_addr, c.master_port)

    def launch(self, script: str, *args: str) -> int:
        """Run ``script args`` on every worker; 0 on success, non-zero (with a summary) on failure."""
        self.preflight(script)
        return self._launch(script, *args)

    def _launch(self, script: str, *args: str) -> int:
        c = self.config
        run_id = c.run_id or (f"na-{c.master_addr}-{c.master_port}" if c.max_nodes > 1 else uuid.uuid4().hex[:12])
        # torch elastic's own log lines repeat what the ranks and the summary say (torch_logs.py), and
        # a lost c10d store's C++ warnings what lost_rendezvous_line says (rendezvous.py).
        with (
            ScratchDir() as scratch,
            torch_elastic_logs(c.verbose),
            quiet_store_warnings(c.verbose),
            node_keeper(reach=self._keeper_reach()) as keeper,  # the workers' memory snapshots outlive them
        ):
            log_dir = Path(c.log_dir) if c.log_dir else scratch / "logs"
            clear_progress_markers(log_dir)  # an earlier job's, e.g. one whose launcher was killed
            params = rendezvous_parameters(c, run_id)
            spec = WorkerSpec(
                role=c.role,
                local_world_size=c.nproc,
                entrypoint=sys.executable,
                event_log_handler=c.event_log_handler,
                virtual_local_rank=c.virtual_local_rank,
                args=self._worker_args(script, args, log_dir, scratch / "shown"),
                rdzv_handler=rendezvous_handler(params, self._token),
                max_restarts=c.max_restarts,
                monitor_interval=c.monitor_interval,
                master_addr=c.master_addr if params.backend == "static" else None,
                master_port=c.master_port if params.backend == "static" else None,
            )
            logs_specs = compat.logs_specs(c, scratch)
            logs_specs.reify = leaving_keeper_files(logs_specs.reify, keeper)  # type: ignore[method-assign]
            agent = RobustElasticAgent(
                spec=spec,
                logs_specs=logs_specs,
                shutdown_timeout=c.shutdown_timeout,
                log_dir=log_dir,
                stop_repeated_failures=c.max_nodes == 1,
                job_token=self._token,
                warm_spares=c.nproc if c.warm_spares else 0,
            )
            saved = dict(os.environ)
            os.environ.update(self._worker_environment())
            usr1 = _forward_usr1(agent)
            try:
                result = agent.run()
            finally:
                spec.rdzv_handler.shutdown()
                agent.close_gates()
                if agent.warm_pool is not None:
                    agent.warm_pool.close()
                clear_progress_markers(log_dir)
                os.environ.clear()
                os.environ.update(saved)
                if usr1 is not None:
                    signal.signal(signal.SIGUSR1, usr1)
            if result.is_failed():
                return failed_job_exit(agent, log_dir, c.max_restarts, show_log_path=bool(c.log_dir))
        return 0

    def _keeper_reach(self) -> Optional[str]:
        """Where the other nodes' workers reach this node's keeper (None on one node): the
        address the rendezvous gives this node, as torch elastic picks it (--local-addr, or the FQDN)."""
        c = self.config
        return None if c.max_nodes == 1 else (c.local_addr or socket.getfqdn())

    def _worker_environment(self) -> dict[str, str]:
        env = {
            # read by torch elastic, as torchrun sets it
            "TORCHELASTIC_SIGNALS_TO_HANDLE": self.config.signals_to_handle,
            OUTPUT_VARIABLE: compat.output_plan(self.config, line_prefix_template()),
        }
        if self.config.backend not in (None, "auto"):
            env["NEURAL_ARCH_BACKEND"] = str(self.config.backend)
        if self.config.timeout is not None:
            env["NEURAL_ARCH_TIMEOUT"] = str(self.config.timeout)
        if "OMP_NUM_THREADS" not in os.environ and self.config.nproc > 1:
            # As torchrun: N workers sharing the cores should not each start all threads.
            env["OMP_NUM_THREADS"] = str(cpu_bind.default_threads(self.config.nproc))
        loopback = loopback_interface()
        if self.config.max_nodes == 1 and loopback is not None:
            # One node: the workers' own gloo/NCCL sockets on loopback too (gloo binds the
            # address the host name resolves to, NCCL its first non-loopback interface).
            for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
                env[name] = os.environ.get(name, loopback)
        return env

    def _job_token(self) -> Optional[JobToken]:
        """What this node presents to join a multi-node job (None on one node)."""
        c = self.config
        if c.max_nodes == 1:
            return None
        try:
            from neural_arch.distributed.env import detect_cluster_env

            cluster = detect_cluster_env()
        except ValueError:  # this launcher's own environment need not describe a rank
            cluster = None
        token = resolve_job_token(c.job_token, c.job_token_file, c.run_id, cluster)
        if token is None:
            print(
                f"launcher: note: no job token (--job-token-file, {TOKEN_ENV}, --job-token, --rdzv-id or a "
                f"scheduler's job id), so any launcher "
                f"pointed at {c.master_addr}:{c.master_port} may join this job.",
                file=sys.stderr,
                flush=True,
            )
        return token


def _forward_usr1(agent: RobustElasticAgent) -> Optional[object]:
    """Pass SIGUSR1 on to the workers while the job runs (its default action would kill the
    launcher and orphan them); the previous handler, to put back. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGUSR1, lambda signum, frame: agent.forward_signal(signum))


def launch_distributed_training(script: str, *args: str, **options: object) -> int:
    """``launch_distributed_training("train.py", "--lr", "0.1", nproc_per_node=2)`` -> exit code."""
    return DistributedLauncher(LaunchConfig(**options)).launch(script, *args)  # type: ignore[arg-type]


def lost_rendezvous_line(exc: BaseException) -> str:
    """One line for a rendezvous that ended under a running job (torch's connection, closed or
    timeout error): what it means and what to do; the job's checkpoints are untouched."""
    if isinstance(exc, RendezvousTimeoutError):
        return (
            f"the rendezvous timed out ({exc}): not every node joined in time (--rdzv_conf join_timeout=SECONDS); "
            "start the same command on every node, with the same --rdzv-endpoint and --rdzv-id."
        )
    return (
        f"lost the rendezvous ({type(exc).__name__}: {exc}): node 0's launcher stopped, or the network "
        f"to it was cut for longer than the rendezvous read_timeout (--rdzv_conf read_timeout=SECONDS, "
        f"default {C10D_READ_TIMEOUT} s). Run the same command on every node to continue from the last checkpoint."
    )


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """CLI entry: usage mistakes exit 2 with one line (``PROG: error: ...``); a failed job
    exits 1 with a summary. ``prog`` names the command in messages (``neural-arch launch``)."""
    try:
        ns = parse_launch_args(sys.argv[1:] if argv is None else argv, prog)
        misplaced = misplaced_options(ns.script_args)
        if misplaced:  # the seeds' order (script, then launcher options): torchrun gives them to the script
            print(
                f"{prog}: note: {' '.join(misplaced)} after the script {'go' if len(misplaced) > 1 else 'goes'} to "
                "the script, as with torchrun; launcher options go before the script.",
                file=sys.stderr,
                flush=True,
            )
        launcher = DistributedLauncher(config_from_args(ns))
        launcher.preflight(ns.script)
    except (ValueError, LaunchUsageError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    try:
        return launcher._launch(ns.script, *ns.script_args)  # preflight done above, where errors exit 2
    except ForeignJobError as exc:  # a wrong port or token: the same command would be refused again
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except RendezvousUnreachable as exc:  # a wrong endpoint, or node 0 not (yet) up: not our bug
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except RendezvousError as exc:  # the rendezvous store lost mid-job (node 0 gone, a long network cut)
        print(f"{prog}: {lost_rendezvous_line(exc)}", file=sys.stderr)
        return 1
    except SignalException as stop:  # Ctrl-C or SIGTERM to the launcher: asked for, not a failure
        name = signal.Signals(stop.sigval).name
        print(
            f"{prog}: stopped by {name}; the workers were stopped too (SIGKILL after --shutdown-timeout).",
            file=sys.stderr,
        )
        return 128 + int(stop.sigval)
    except Exception as exc:  # noqa: BLE001 - the job's machinery failed, not the user's input
        traceback.print_exc()
        print(
            f"{prog}: the launcher itself failed ({type(exc).__name__}: {exc}); the traceback above shows where.",
            file=sys.stderr,
        )
        return 1
