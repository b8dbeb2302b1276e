"""loss.png is drawn by a helper process started with the run (training/loss_plot.py), off the critical path.

Run: ``.venv/bin/python -m pytest tests/training/test_loss_plot.py -q`` (about 20 s: three 4-step
in-process runs of the tiny regression MLP and one helper whose parent is killed).

What must hold: a run's loss.png is there when ``train`` returns; the summary never waits for the
plot, and a plot that fails or hangs is one line on stdout, never a failed run; without a helper
(it cannot start) the plot is drawn in the run's process; the helper ends with the run's process.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from neural_arch.training import loss_plot
from neural_arch.training.config import load_config
from neural_arch.training.trainer import train
from tests.helpers.trainer_runs import QUIET_SMALL

RUN = ["training.steps=4", *QUIET_SMALL]


def run(tmp_path: Path) -> Path:
    train(load_config(None, [*RUN, f"run.dir={tmp_path / 'run'}"]))
    return tmp_path / "run"


def test_the_plot_is_there_when_train_returns(tmp_path):
    out = run(tmp_path)
    png = (out / "loss.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000  # two curves, axes, a legend


def test_a_plot_that_hangs_or_fails_is_one_line_and_the_run_succeeds(tmp_path, monkeypatch, capsys):
    # A helper that takes the request and never answers: the run prints its summary, waits the
    # bound, says so in one line and returns.
    monkeypatch.setattr(loss_plot, "_SERVE", "import sys, time; sys.stdin.readline(); time.sleep(600)")
    monkeypatch.setattr(loss_plot, "PLOT_SECONDS", 1.0)
    out = run(tmp_path / "hangs")
    said = capsys.readouterr().out
    assert said.index("finished in") < said.index("note: loss.png not drawn (not drawn within 1 s)")
    assert not (out / "loss.png").exists() and (out / "summary.json").is_file()
    monkeypatch.setattr(loss_plot, "_SERVE", "import sys; sys.stdin.readline(); print('OSError: no fonts', flush=True)")
    run(tmp_path / "fails")
    assert (
        "note: loss.png not drawn (OSError: no fonts); the run's other outputs are complete" in capsys.readouterr().out
    )


def test_without_a_helper_the_run_draws_the_plot_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))  # Popen raises: no helper
    assert (run(tmp_path) / "loss.png").is_file()


HELPER_ORPHANED = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from neural_arch.training.loss_plot import LossPlot
plot = LossPlot.start()
print(plot.proc.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the run's process dies; its helper must not stay behind
"""


def test_the_helper_ends_with_the_run_s_process(tmp_path):
    repo = str(Path(loss_plot.__file__).resolve().parents[2])
    parent = subprocess.run([sys.executable, "-c", HELPER_ORPHANED, repo], capture_output=True, text=True, timeout=60)
    assert parent.returncode == -signal.SIGKILL, parent.stderr
    helper = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 30  # a bound for a busy machine, not a timing assertion
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper), f"helper {helper} outlived its parent"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"
