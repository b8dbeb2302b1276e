"""Batches built in DataLoader worker processes (``training.data_workers``): the run of ``workers: 0``, bitwise.

Run: ``.venv/bin/python -m pytest tests/training/test_batch_workers.py -q -p no:cacheprovider``
The first test trains in this process (world size 1) with 0 and 2 workers: 20 steps of 101
samples in batches of 12 and 2 micro-batches cross two epoch ends and uneven last batches.
The second kills rank 1 of a 2-rank run with workers at step 7 (no restart), resumes the run
on 1 rank with workers and compares it with an uninterrupted 2-rank run without workers
(atol 1e-10 across world sizes, as test_trainer.py: only summation order differs), and
checks that no worker outlived its killed rank. Tolerances: bitwise in this process.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from neural_arch.training.batch_workers import BatchWorkers
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train
from neural_arch.training.typed_config import ConfigError
from tests.helpers.cli import cli
from tests.helpers.run_outputs import assert_params, final_params, metrics, sample_ids
from tests.helpers.trainer_runs import BASE, FAULT, TWENTY_STEPS


def test_two_workers_give_bitwise_the_run_of_none_and_leave_no_process(tmp_path, monkeypatch):
    hits: list[int] = []
    real_close = BatchWorkers.close
    monkeypatch.setattr(BatchWorkers, "close", lambda self: (hits.append(self.hits), real_close(self))[1])
    base = [*TWENTY_STEPS, "logging.record_samples=true"]
    for workers in (0, 2):
        train(load_config(None, [*base, f"run.dir={tmp_path / str(workers)}", f"training.data_workers={workers}"]))
    assert hits == [20]  # every step's batch came from a worker, none rebuilt
    assert not multiprocessing.active_children()  # the workers were shut down with the run
    assert sample_ids(tmp_path / "2", 1) == sample_ids(tmp_path / "0", 1)
    assert metrics(tmp_path / "2") == metrics(tmp_path / "0")
    assert_params(final_params(tmp_path / "2"), final_params(tmp_path / "0"), atol=0)


def test_workers_need_prefetch_and_a_count_of_at_least_zero():
    with pytest.raises(ConfigError, match="training.data_workers=2 .* set training.data_workers=0"):
        load_config(None, ["training.data_workers=2", "training.prefetch=false"])
    with pytest.raises(ConfigError, match="training.data_workers"):
        load_config(None, ["training.data_workers=-1"])


def survivors(marker: str) -> list[int]:
    """Processes whose command line names ``marker`` (the killed run's directory)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in open(f"/proc/{pid}/cmdline").read():
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.multiprocess
@pytest.mark.timeout(600)  # three runs of up to 240 s each would fail on their own first
def test_killed_run_with_workers_resumes_exactly_on_another_world_size(tmp_path):
    run, reference = tmp_path / "run", tmp_path / "reference"
    common = [*BASE, "--set", "training.steps=12", "--set", "schedule.decay=constant"]
    common += ["--set", "logging.record_samples=true"]
    ref = cli("train", *common, "--set", f"run.dir={reference}", "--nproc-per-node", "2")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    # rank 1 SIGKILLs itself after step 7, mid-epoch (9 batches an epoch); the last checkpoint is step 4
    killed = subprocess.run(
        [sys.executable, "-m", "neural_arch.distributed.launcher", "--nproc_per_node=2", "--max_restarts=0"]
        + [FAULT, "kill", "7", *common, "--set", f"run.dir={run}", "--set", "training.data_workers=2"],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert killed.returncode != 0 and not (run / "summary.json").exists(), killed.stdout + killed.stderr
    deadline = time.monotonic() + 10  # PR_SET_PDEATHSIG: the kernel kills them as their rank dies
    while survivors(str(run)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not survivors(str(run)), "loader workers outlived their killed rank"
    resumed = cli("train", *common, "--set", f"run.dir={run}", "--set", "training.data_workers=2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed from step 4" in (run / "logs" / "rank_0.log").read_text()
    assert_params(final_params(run), final_params(reference), atol=1e-10)
    got, want = sample_ids(run, 5), sample_ids(reference, 5)
    assert sorted(got) == list(range(5, 13))
    for step in got:  # each global batch is the same set of samples, none skipped or repeated
        assert sorted(got[step]) == sorted(want[step]), step
