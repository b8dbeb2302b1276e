"""What tests/integrations/test_ray_train.py runs on its local Ray cluster: the float64 regression
run, the user's script, a worker killed once, and a private Ray cluster that always goes away.

Use: ``with local_ray(root) as session: ...`` (``ray.init`` with 2 CPUs, its files under
``root``; shut down on exit, and no raylet left behind); ``TorchTrainer(train_loop_per_worker,
train_loop_config={"overrides": regression(steps=12), "callbacks": [KillOnce(6, marker)]}, ...)``.
The callbacks are pickled by Ray and imported by its workers from this module (the cluster's
workers get the checkout on PYTHONPATH).
"""

from __future__ import annotations

import os
import runpy
import shutil
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from unittest import mock

from neural_arch.training.callbacks import Callback, StepEvent
from tests.helpers.paths import REPO, SCRIPTS

USER_SCRIPT = SCRIPTS / "ray_user_script.py"
"""``ray_user_script.py OUT EPOCHS``: a DDP MLP in float64 that saves every epoch (tests/scripts/)."""


def regression(steps: int, run_dir: str = "runs/regression") -> list[str]:
    """The regression MLP in float64 (only summation order differs across world sizes): 101 samples
    in global batches of 12 (uneven epoch ends), a checkpoint every 4 steps, validation every 6."""
    settings = {
        "run.dir": run_dir,
        "training.steps": steps,
        "training.precision": "fp64",
        "training.global_batch_size": 12,
        "training.val_every": 6,
        "data.num_samples": 101,
        "data.val_samples": 25,
        "model.hidden": 8,
        "schedule.warmup_steps": 3,
        "checkpoint.every_steps": 4,
        "logging.progress": "false",
        "logging.tensorboard": "false",
    }
    return [f"{key}={value}" for key, value in settings.items()]


class KillOnce(Callback):
    """Rank 1 SIGKILLs itself right after step ``step``, the first time only (``marker`` remembers)."""

    def __init__(self, step: int, marker: Path) -> None:
        self.step, self.marker = step, marker

    def on_step(self, event: StepEvent) -> None:
        if event.step == self.step and event.rank == 1 and not self.marker.exists():
            self.marker.write_text(f"killed after step {event.step}\n")
            os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def local_ray(root: Path) -> Iterator[Path]:
    """A private local Ray cluster (2 CPUs, no dashboard, no token file in ~/.ray) for the ``with``
    body; yields its session directory (the workers' logs are in its logs/)."""
    import ray

    # Unix socket paths must stay under 108 bytes: a short directory, not pytest's deep tmp_path.
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    quiet = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env_vars = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **quiet}
    with mock.patch.dict(os.environ, quiet):
        context = ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(temp), runtime_env={"env_vars": env_vars})
    try:
        yield Path(context.address_info["session_dir"])
    finally:
        ray.shutdown()
        leftovers = _processes_using(temp)
        for pid in leftovers:  # ours, found by the private directory in their command line
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
        assert not leftovers, f"Ray processes still running after ray.shutdown(): {leftovers}"


def run_script_here(script: Path, *args: str) -> None:
    """Run ``script`` in this process as ``python script ARGS`` would (one process, world size 1)."""
    saved = sys.argv
    sys.argv = [str(script), *args]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved


def _processes_using(temp: Path, wait: float = 10.0) -> list[int]:
    """Processes whose command line names ``temp`` (Ray's raylet, GCS, workers), after up to ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if str(temp).encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
