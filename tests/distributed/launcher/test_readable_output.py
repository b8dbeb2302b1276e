"""A script's bug under the launcher reads like ``python bug.py``: the user's frames only, each
traceback shown once per job on the console (a restart's repeat is one line), then once in
the failure summary; torch elastic's own log lines only with ``--verbose``.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_readable_output.py -q``
The first two tests start real launchers (2 workers, gloo, 127.0.0.1, a free port).
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pytest

from neural_arch.distributed.launcher.failures import without_requested_stacks
from neural_arch.distributed.launcher.log_format import attempt_id, attempt_number
from neural_arch.distributed.launcher.program import run_python
from neural_arch.distributed.launcher.repeats import ShownTracebacks
from neural_arch.distributed.launcher.torch_logs import torch_elastic_logs
from neural_arch.distributed.launcher.user_traceback import user_traceback
from tests.helpers.cli import launch

BUG = (
    "import os\nsettings = {} if os.environ['RANK'] == '1' else {'missing': 0}\n"
    "print('starting', flush=True)\nvalue = settings['missing']\n"
)
"""A deterministic bug: KeyError at line 4, on rank 1 on every attempt (on every rank at once, the
first attempt would not be restarted: restart_policy.failed_alike)."""
HEADER = "Traceback (most recent call last):"
KEY_ERROR = re.compile(r"^(\[rank \d+\] |\s+\| )?KeyError: 'missing'$", re.M)
TORCH_LOG_LINE = re.compile(r"^[EW]\d{4} ", re.M)
"""torch's own log lines, e.g. ``E1125 06:14:35.021000 3276 .../api.py:1002] failed (exitcode: 1) ...``."""
WRAPPER_FRAMES = ("launcher/worker.py", "program.py", "runpy", "torch/distributed/elastic")


def run_bug(tmp_path: Path, *options: str) -> str:
    """The whole output (stdout, then stderr) of the launcher running BUG on 2 workers."""
    script = tmp_path / "bug.py"
    script.write_text(BUG)
    proc = launch("--nproc_per_node=2", *options, str(script), timeout=90)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_deterministic_bug_shows_its_traceback_at_most_three_times_without_launcher_frames(tmp_path):
    out = run_bug(tmp_path)
    # Attempt 0 shows it (per rank that got to raise), attempt 1 names it, the summary quotes it once.
    assert 2 <= out.count(HEADER) <= 3, out
    assert 2 <= len(KEY_ERROR.findall(out)) <= 3, out
    assert re.search(
        r"^\[rank (0|1)\] neural_arch: attempt 1 failed with the same traceback as rank (0|1) attempt 0 "
        r"\(shown above\)$",
        out,
        re.M,
    ), out
    assert out.count(f'File "{tmp_path / "bug.py"}", line 4, in <module>') == out.count(HEADER), out
    for frame in WRAPPER_FRAMES:
        assert frame not in out, out
    assert not TORCH_LOG_LINE.search(out), out
    summary = out[out.index("neural_arch launcher: job failed after 2 attempt(s)") :]
    assert summary.count(HEADER) == 1 and "(traceback):" in summary, summary


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_verbose_shows_torch_elastic_log_lines(tmp_path):
    out = run_bug(tmp_path, "--verbose")
    assert TORCH_LOG_LINE.search(out), out
    assert "closing signal SIGTERM" in out or "failed (exitcode: 1)" in out, out
    assert "runpy" not in out and "launcher/worker.py" not in out  # --verbose is about torch's lines only


@pytest.fixture
def as_python_leaves_it():
    """``run_python`` leaves the interpreter as ``python script.py`` would (the script's ``__main__``,
    argv and path): put pytest's back."""
    saved = sys.modules["__main__"], sys.argv[:], sys.path[:], getattr(sys, "orig_argv", None)
    yield
    sys.modules["__main__"], sys.argv[:], sys.path[:] = saved[0], saved[1], saved[2]
    if saved[3] is not None:
        sys.orig_argv = saved[3]


def test_frames_above_the_users_go_and_frames_below_stay(tmp_path, as_python_leaves_it):
    script = tmp_path / "recorded.py"
    # torch's @record wraps the user's main: its frame sits between the user's, and goes.
    script.write_text(
        "from torch.distributed.elastic.multiprocessing.errors import record\n"
        "@record\ndef main():\n    {}['missing']\nmain()\n"
    )
    with pytest.raises(KeyError) as raised:
        run_python(str(script), [], "script")
    text = user_traceback(raised.value)
    assert f'File "{script}", line 4, in main' in text and text.endswith("KeyError: 'missing'\n"), text
    assert "program.py" not in text and "runpy" not in text and "errors/__init__.py" not in text, text
    # Failing inside the launcher's code, below the caller's frame: those frames are where it happened.
    with pytest.raises(FileNotFoundError) as missing:
        run_python(str(tmp_path / "absent.py"), [], "script")
    assert "program.py" in user_traceback(missing.value)


def test_a_traceback_repeats_only_across_attempts(tmp_path):
    text = "Traceback (most recent call last):\nKeyError: 'missing'\n"
    ShownTracebacks(tmp_path, rank=1, attempt=0).add(text)
    ShownTracebacks(tmp_path, rank=0, attempt=0).add(text)
    assert ShownTracebacks(tmp_path, rank=0, attempt=0).repeat_of(text) is None  # same attempt: shown again
    assert ShownTracebacks(tmp_path, rank=1, attempt=1).repeat_of(text) == (0, 0)  # the first showing, by rank
    assert ShownTracebacks(tmp_path, rank=1, attempt=1).repeat_of(text + "other\n") is None
    assert attempt_number(attempt_id(2, "ab12")) == 1 and attempt_number("0") == 0


def test_torch_elastic_records_reach_no_handler_inside_the_block():
    seen: list[str] = []
    catcher = logging.Handler()
    catcher.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    parent = logging.getLogger("torch.distributed")  # torch's handler sits here, or higher up
    parent.addHandler(catcher)
    api = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    try:
        with torch_elastic_logs(verbose=False):
            api.warning("hidden")
        with torch_elastic_logs(verbose=True):
            api.warning("shown")
        api.warning("after")
    finally:
        parent.removeHandler(catcher)
    assert seen == ["shown", "after"]


def test_a_stopped_ranks_output_tail_leaves_out_the_stacks_the_launcher_asked_for():
    # A survivor stopped while it exits (in worker.py's close_output) was quoted with the launcher's
    # frames: its "last lines" included the dump the launcher asked for (shown apart, filtered).
    requested = [
        "Thread 0x00007f01 (most recent call first):",
        '  File "/x/neural_arch/distributed/runtime/heartbeat.py", line 81 in _beat',
        "",
        "Current thread 0x00007f02 (most recent call first):",
        '  File "/x/neural_arch/distributed/launcher/worker.py", line 265 in close_output',
        "",
    ]
    crash = ["Fatal Python error: Segmentation fault", "", *requested[3:5], "", "Extension modules: torch (total: 1)"]
    assert without_requested_stacks(["starting", *requested]) == ["starting"]
    assert without_requested_stacks(["starting", *requested, "after"]) == ["starting", "after"]
    assert without_requested_stacks(["starting", *crash]) == ["starting", *crash]  # a crash's own dump stays
