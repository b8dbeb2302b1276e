"""End to end: a grossly slow rank is named, in the console and the summary.

Run: ``.venv/bin/python -m pytest tests/training/test_stragglers.py -q``
2 real ranks under the launcher, the regression MLP, 100 steps, a metrics row every 10. Every
forward sleeps 4 ms (tests/scripts/train_straggler.py) and rank 1's 40 ms from the start: ten times
slower. The test checks only that rank 1 is named, never when or how often (that depends on the
machine's load); the rule itself (threshold, streak, episodes, equal ranks never named) is tested on
injected time series in test_straggler_watch.py.
"""

import re

import pytest

from tests.helpers.cli import launch
from tests.helpers.paths import SCRIPTS

pytestmark = pytest.mark.multiprocess  # launches ranks

SCRIPT = str(SCRIPTS / "train_straggler.py")
WARNING = re.compile(r"straggler at step \d+: rank (\d+) on \S+ spends")


@pytest.mark.timeout(180)
def test_a_grossly_slow_rank_is_named(tmp_path):
    settings = ["training.steps=100", "logging.every_steps=10", "logging.progress=false", "logging.tensorboard=false"]
    proc = launch("--nproc_per_node=2", SCRIPT, "0", "--set", f"run.dir={tmp_path / 'run'}", *settings)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    named = WARNING.findall(proc.stdout)
    assert named and set(named) == {"1"}, proc.stdout  # rank 0 is the lower median of two: never above it
    assert "straggler warnings: rank 1" in (tmp_path / "run" / "summary.txt").read_text()
