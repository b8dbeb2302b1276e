"""StragglerWatch's rule on given numbers: more than the threshold above the median, K rows in a row, once per episode.

Run: ``.venv/bin/python -m pytest tests/training/test_straggler_watch.py -q`` (no processes).
"""

from neural_arch.training.stragglers import StragglerWatch


def test_named_after_k_slow_rows_once_per_episode_against_the_lower_median():
    watch = StragglerWatch(["a", "b"], threshold=0.2, intervals=3)
    slow = [0.004, 0.006]  # rank 1 is 50% above rank 0: the lower median of two is rank 0's time
    assert watch.check(slow, 10) == [] and watch.check(slow, 20) == []
    lines = watch.check(slow, 30)
    assert len(lines) == 1 and lines[0].startswith("straggler at step 30: rank 1 on b spends 6.00 ms"), lines
    assert watch.check(slow, 40) == []  # the same episode: no second line
    assert watch.check([0.004, 0.0045], 50) == []  # 12.5% above: recovered
    for step in (60, 70):
        assert watch.check(slow, step) == []
    assert len(watch.check(slow, 80)) == 1  # a new episode
    assert watch.warnings == [0, 2] and watch.summary() == "  straggler warnings: rank 1 (b) 2"


def test_equal_ranks_and_a_fast_rank_are_not_named():
    watch = StragglerWatch(["a", "b", "c"], threshold=0.2, intervals=1)
    assert watch.check([0.004, 0.004, 0.0041], 10) == []
    assert watch.check([0.004, 0.004, 0.001], 20) == []  # faster than the median is never a straggler
    assert watch.summary() == ""
