"""Progress is a bar on a terminal and plain periodic lines anywhere else (a log, a pipe, the launcher).

Run: ``.venv/bin/python -m pytest tests/training/test_progress.py -q``
The clock is injected: what is printed depends on the steps and the fake time, never on the machine.
"""

import io

from neural_arch.training.progress import BarProgress, LineProgress, open_progress
from neural_arch.training.reporting import RunReporter


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_stream_that_is_not_a_terminal_gets_lines_and_a_terminal_gets_the_bar():
    assert isinstance(open_progress(10, 0, io.StringIO()), LineProgress)
    bar = open_progress(10, 0, Terminal())
    assert isinstance(bar, BarProgress)
    bar.close()


def test_lines_come_at_most_once_per_interval_plus_the_last_step():
    out, clock = io.StringIO(), FakeClock()
    progress = LineProgress(total=400, start=0, stream=out, interval_s=10.0, clock=clock)
    for step in range(1, 401):
        clock.now += 0.125  # 50 s in all
        progress.update(step, 0.5, 80.0)
    progress.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split()[1] for line in lines] == ["1/400", "81/400", "161/400", "241/400", "321/400", "400/400"]
    assert lines[0] == "step 1/400 (0%) loss 0.5 80 samples/s elapsed 0:00 left 0:49"
    assert lines[-1] == "step 400/400 (100%) loss 0.5 80 samples/s elapsed 0:50"
    assert max(len(line) for line in lines) < 100


def test_close_shows_the_last_step_once_and_a_resumed_run_counts_from_its_start():
    out, clock = io.StringIO(), FakeClock()
    progress = LineProgress(total=100, start=60, stream=out, interval_s=10.0, clock=clock)
    clock.now += 4.0
    progress.update(61, float("nan"), 10.0)  # no loss logged yet: none shown
    clock.now += 4.0
    progress.update(62, 0.25, 10.0)
    progress.close()
    assert out.getvalue().splitlines() == [
        "step 61/100 (61%) 10 samples/s elapsed 0:04 left 2:36",
        "step 62/100 (62%) loss 0.25 10 samples/s elapsed 0:08 left 2:32",
    ]


def test_the_run_reporter_prints_plain_lines_when_stderr_is_not_a_terminal(tmp_path, capsys):
    reporter = RunReporter(tmp_path, rank=0, total_steps=50, start_step=0, progress=True, tensorboard=False)
    for step in range(1, 51):
        reporter.progress(step, 0.5, 100.0)
    reporter.close()
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert lines[0].startswith("step 1/50 (2%) loss 0.5 100 samples/s")
    assert lines[-1].startswith("step 50/50 (100%) loss 0.5")
    assert len(lines) <= 3  # one line per LINE_INTERVAL_S at most, plus the last step
