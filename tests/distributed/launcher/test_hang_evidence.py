"""A rank stopped while its peer waits in DDP's own all-reduce: named, its stack shown, the job restarted.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_hang_evidence.py -q``
2 real ranks under the launcher (one restart allowed), the regression MLP, ``training.timeout=10``.
Rank 1 SIGSTOPs itself in its forward at step 3 (tests/scripts/train_stop_in_ddp.py), so rank 0
times out inside DDP's gradient all-reduce, not in a collective of the script's own. Before the
launcher stops the group, every worker writes its threads' stacks into its rank log; the restart
line and the summary of the failed attempt name rank 1, the one that did not arrive, as the cause
and rank 0's timeout as its consequence (blame.py), the summary shows where rank 1's main thread
was (the script's forward), and the restarted attempt trains to the end. How long the recovery
takes is measured, not asserted: benchmarks/recovery/hang_recovery.py.
"""

import pytest

from tests.helpers.cli import launch
from tests.helpers.paths import SCRIPTS
from tests.helpers.trainer_runs import BASE

pytestmark = pytest.mark.multiprocess  # launches ranks


@pytest.mark.timeout(180)
def test_the_stopped_rank_is_named_with_its_stack_and_the_job_restarts(tmp_path):
    run, logs = tmp_path / "run", tmp_path / "logs"
    args = [*BASE, "--set", f"run.dir={run}", "training.steps=6", "training.timeout=10"]
    (logs / "progress").mkdir(parents=True)
    (logs / "progress" / "attempt_1-an-earlier-job").touch()  # a killed launcher's restart marker
    proc = launch(
        "--nproc_per_node=2", "--max_restarts=1", f"--log_dir={logs}", str(SCRIPTS / "train_stop_in_ddp.py"), *args
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "did not arrive: rank 1" in out, out
    restart = [line for line in out.splitlines() if "Restarting the group" in line]
    assert len(restart) == 1 and restart[0].startswith("neural_arch launcher: rank 1 (host "), out
    assert "did not arrive (" in restart[0] and "rank 0 timed out in collective" in restart[0], restart[0]
    assert "rank 0 failed as a consequence (RuntimeError: timed out)" in restart[0], restart[0]
    rank1 = (logs / "rank_1.log").read_text()
    assert "most recent call first" in rank1 and "train_stop_in_ddp.py" in rank1, rank1[-3000:]
    assert not (logs / "progress").exists()  # markers, the earlier job's and this one's, removed


@pytest.mark.timeout(180)
def test_without_restarts_the_summary_shows_where_the_stopped_rank_was(tmp_path):
    args = [*BASE, "--set", f"run.dir={tmp_path / 'run'}", "training.steps=6", "training.timeout=10"]
    proc = launch("--nproc_per_node=2", "--max_restarts=0", str(SCRIPTS / "train_stop_in_ddp.py"), *args)
    assert proc.returncode != 0
    summary = proc.stderr[proc.stderr.index("neural_arch launcher: job failed") :]
    assert "root cause: attempt 0, rank 1 (local rank 1, pid " in summary and "did not arrive (" in summary, summary
    where = summary[summary.index("rank 1, attempt 0 (its main thread when the group was stopped):") :]
    assert 'train_stop_in_ddp.py", line' in where.splitlines()[1] and "in stopping_loss" in where, summary
