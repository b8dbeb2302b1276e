"""StragglerWatch's rule on injected time series: more than the threshold above the median, K rows in
a row, once per episode. Deterministic and in-process: the per-rank forward times are made here (a
seeded jitter bounded so that equal ranks can never differ by the threshold), never measured.

Run: ``.venv/bin/python -m pytest tests/training/test_straggler_watch.py -q`` (no processes).
"""

import random
import re

from neural_arch.training.stragglers import StragglerWatch

EVERY = 10  # steps per metrics row
WARNING = re.compile(r"straggler at step (\d+): rank (\d+) on ")


def series(ranks: int, rows: int, slow: dict[int, tuple[int, int, float]], seed: int = 0) -> list[list[float]]:
    """``rows`` rows of every rank's forward seconds: 4 ms times a jitter in [0.92, 1.08] (at most 17.4%
    apart, below the 20% threshold), and ``slow[rank] = (first_row, end_row, factor)`` on top."""
    rng = random.Random(seed)
    out = []
    for row in range(rows):
        times = [0.004 * rng.uniform(0.92, 1.08) for _ in range(ranks)]
        for rank, (first, end, factor) in slow.items():
            if first <= row < end:
                times[rank] *= factor
        out.append(times)
    return out


def named(watch: StragglerWatch, rows: list[list[float]]) -> list[tuple[int, int]]:
    """(step, rank) of every warning over the rows, one row every EVERY steps."""
    found = []
    for row, times in enumerate(rows):
        for line in watch.check(times, (row + 1) * EVERY):
            step, rank = WARNING.match(line).groups()
            found.append((int(step), int(rank)))
    return found


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


def test_a_rank_slow_from_row_10_is_named_at_the_third_slow_row_exactly_once():
    for seed in range(20):
        watch = StragglerWatch(["a", "b"], threshold=0.2, intervals=3)
        assert named(watch, series(2, 30, {1: (10, 30, 1.5)}, seed)) == [(130, 1)], seed  # rows 10, 11, 12
        assert watch.summary() == "  straggler warnings: rank 1 (b) 1"


def test_jittery_equal_ranks_are_never_named_in_a_thousand_rows():
    for ranks in (2, 3, 4, 8):
        watch = StragglerWatch([f"h{r}" for r in range(ranks)], threshold=0.2, intervals=1)
        assert named(watch, series(ranks, 1000, {}, seed=ranks)) == [] and watch.summary() == ""


def test_spikes_shorter_than_the_streak_are_never_named():
    # A busy machine: rank 1 three times slower for 2 rows at a time, every 5 rows; rank 2 once for 1 row.
    rows = series(3, 100, {})
    for start in range(0, 100, 5):
        for row in (start, start + 1):
            rows[row][1] *= 3
    rows[50][2] *= 10
    assert named(StragglerWatch(["a", "b", "c"], threshold=0.2, intervals=3), rows) == []


def test_the_median_of_four_is_the_lower_middle_and_two_slow_ranks_are_both_named():
    watch = StragglerWatch(["a", "b", "c", "d"], threshold=0.2, intervals=2)
    rows = series(4, 10, {2: (3, 10, 2.0), 3: (3, 10, 2.0)})  # half the ranks slow: the lower median is a fast one
    assert named(watch, rows) == [(50, 2), (50, 3)]


def test_a_recovered_rank_is_named_again_in_a_new_episode_only():
    watch = StragglerWatch(["a", "b"], threshold=0.2, intervals=3)
    rows = series(2, 40, {1: (5, 15, 2.0)}) + series(2, 20, {1: (5, 20, 2.0)}, seed=1)
    assert named(watch, rows) == [(80, 1), (480, 1)] and watch.warnings == [0, 2]


def test_zero_times_name_nobody():
    watch = StragglerWatch(["a", "b"], threshold=0.2, intervals=1)
    assert watch.check([0.0, 0.0], 10) == [] and watch.check([0.0, 0.004], 20) == []  # no base to compare with
