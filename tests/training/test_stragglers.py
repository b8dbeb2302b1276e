"""A slow rank is named while it is slow; equal ranks are never named.

Run: ``.venv/bin/python -m pytest tests/training/test_stragglers.py -q``
2 real ranks under the launcher, the regression MLP, 300 steps, a metrics row every 10. Every
forward sleeps 4 ms (tests/scripts/train_straggler.py); from step 100 rank 1 sleeps 6 ms (50%
more). The default threshold (20% above the median) and streak (3 rows) must name rank 1 by
step 100 + 3 rows (130) and once only; without the slow-down no rank is named in 300 steps.
"""

import re

import pytest

from tests.helpers.cli import launch
from tests.helpers.paths import SCRIPTS

pytestmark = pytest.mark.multiprocess  # launches ranks

SCRIPT = str(SCRIPTS / "train_straggler.py")
WARNING = re.compile(r"straggler at step (\d+): rank (\d+) on \S+ spends")


def run(tmp_path, slow_from: int) -> str:
    settings = ["training.steps=300", "logging.every_steps=10", "logging.progress=false", "logging.tensorboard=false"]
    proc = launch("--nproc_per_node=2", SCRIPT, str(slow_from), "--set", f"run.dir={tmp_path / 'run'}", *settings)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.timeout(180)
def test_a_rank_slow_from_step_100_is_named_within_three_rows(tmp_path):
    out = run(tmp_path, 100)
    named = [(int(step), int(rank)) for step, rank in WARNING.findall(out)]
    assert named and named[0][1] == 1 and 100 < named[0][0] <= 130, out
    assert len(named) == 1, named  # one warning for the one episode
    assert "straggler warnings: rank 1" in (tmp_path / "run" / "summary.txt").read_text()


@pytest.mark.timeout(180)
def test_equal_ranks_are_never_named(tmp_path):
    out = run(tmp_path, -1)
    assert not WARNING.findall(out), out
    assert "straggler" not in (tmp_path / "run" / "summary.txt").read_text()
