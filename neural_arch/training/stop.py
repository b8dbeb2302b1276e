"""Graceful stop: SIGINT, SIGTERM and SIGUSR1 end training after the current step, saved.

Used by trainer.py: ``with StopSignals() as stop:`` around the loop, ``stop.agreed()`` after
every step. A signal only sets a flag; the loop finishes the step in progress, all ranks
agree that one of them was signalled (a 1-element all-reduce about every ``CHECK_SECONDS``,
on the same step on every rank, so they stop together and nobody waits in a collective the
others left), write a checkpoint and leave with ``TrainingStopped``. The command line prints
how to continue and exits 128 + the signal's number, as a shell reports a process killed by it.

Where the signals come from: Ctrl-C (SIGINT) in a terminal; our launcher, torchrun or a
scheduler stopping the workers (SIGTERM); SLURM warning a job before its time limit or a
preemption (``#SBATCH --signal=USR1@120``: SIGUSR1 to every task). A second SIGINT or
SIGTERM while the step finishes falls back to the default behaviour (stop at once).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from types import FrameType
from typing import Any, Optional

import torch

import neural_arch.distributed as nd
from neural_arch.distributed.launcher.channel import STOP, tell

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)

CHECK_SECONDS = 0.5
"""Ranks agree on a stop about this often, not after every step. Why: the agreement is one more
collective per step, a noticeable share of a small model's step on gloo; a stop that lands
within half a second more is still well inside any scheduler's grace time (SLURM's KillWait
is 30 s by default; ``--signal=USR1@120`` gives 120 s)."""


class TrainingStopped(Exception):
    """Training stopped on a signal after saving a checkpoint at ``step`` of ``steps``. Made once
    the checkpoint is on disk; under our launcher it tells the launcher so (``channel.STOP``),
    which then does not restart what was asked to stop (exiting 128 + the signal alone does not
    tell it: a script's exit codes are its own)."""

    def __init__(self, signum: int, step: int, steps: int, checkpoint: str) -> None:
        self.signum, self.step, self.steps, self.checkpoint = signum, step, steps, checkpoint
        self.rank = nd.get_rank()
        tell(STOP, str(int(signum)))
        name = signal.Signals(signum).name
        super().__init__(
            f"stopped by {name} at step {step} of {steps}; checkpoint saved in {checkpoint}. "
            "Run the same command to continue from there."
        )

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """Catch the stop signals for the life of a ``with`` block (main thread only; elsewhere a no-op)."""

    def __init__(self) -> None:
        self.received: Optional[int] = None
        self._previous: dict[int, Any] = {}
        self._interval, self._calls = 1, 0  # calls between agreements (the first follows step 1), calls since the last
        self._since = time.monotonic()
        self.answers: Optional[tuple[float, ...]] = None
        """After a call of ``agreed`` that agreed: the maximum over the ranks of each of its ``asks``."""

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _note(self, signum: int, frame: Optional[FrameType]) -> None:
        self.received = self.received or signum
        if signum != signal.SIGUSR1:  # a second Ctrl-C / SIGTERM acts at once, as usual
            signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))

    def agreed(self, force: bool = False, asks: tuple[float, ...] = ()) -> Optional[int]:
        """The signal any rank received (the same answer on every rank), or None; call it after
        every step on every rank. Collective only on some calls: every rank counts the same calls
        and computes the same interval, so they all agree at the same step. ``force`` (the same
        on every rank) agrees now: after the last step, and after a step that validated or saved,
        whose time the interval cannot have foreseen. ``asks``: this rank's flags to agree on in
        the same all-reduce (the trainer's callbacks: run_callbacks.py); ``answers`` is then their
        maximum over the ranks, or None after a call that did not agree."""
        if nd.get_world_size() == 1:
            self.answers = tuple(asks)
            return self.received
        self._calls += 1
        if self._calls < self._interval and not force:
            self.answers = None
            return None
        now = time.monotonic()
        flag = torch.tensor([float(self.received or 0), now - self._since, *asks], dtype=torch.float64)
        flag = nd.all_reduce(flag, op="max", check=False)
        self.answers = tuple(float(x) for x in flag[2:])
        # The slowest rank's seconds per step (the same number on every rank) set the next interval.
        per_step = float(flag[1]) / self._calls
        self._interval, self._calls = max(1, int(CHECK_SECONDS / max(per_step, 1e-6))), 0
        self._since = now
        return int(flag[0]) or None


def requeue_if_asked(asked: bool, signum: int) -> None:
    """Rank 0: put this SLURM job back in the queue (``checkpoint.requeue_on_stop``), saying what happened."""
    if not asked or nd.get_rank() != 0:
        return
    cluster = nd.detect_cluster_env()
    if cluster.scheduler != "slurm" or not cluster.scheduler_job_id:
        where = f"a {cluster.scheduler} job" if cluster.scheduler else "no scheduler's job"
        print(f"checkpoint.requeue_on_stop: not a SLURM job ({where}); not requeued", flush=True)
        return
    job = cluster.scheduler_job_id
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    # The requeue ends this job at once: SLURM's SIGTERM to the job's processes can reach scontrol
    # itself before it exits (seen under load), which is the requeue taking effect, not failing.
    if done.returncode in (0, -signal.SIGTERM, -signal.SIGKILL):
        print(
            f"requeued SLURM job {job} after {signal.Signals(signum).name}: it resumes from this checkpoint when "
            "it starts again",
            flush=True,
        )
    else:
        print(
            f"could not requeue SLURM job {job}: scontrol requeue said {done.stderr.strip() or done.returncode}; "
            "submit the same job again to continue",
            flush=True,
        )
