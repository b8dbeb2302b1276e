"""``exit_now``: a normal exit's effects (threads joined, atexit handlers run, streams flushed,
the exit code), without the interpreter's teardown.

Run: ``.venv/bin/python -m pytest tests/utils/test_fast_exit.py``
"""

import os
import subprocess
import sys

SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path
from neural_arch.utils.fast_exit import exit_now
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
def late():
    time.sleep(0.2)
    (out / "thread").write_text("joined")
threading.Thread(target=late).start()
sys.stdout.write("buffered, no newline")
exit_now(3)
"""


def test_exit_now_keeps_what_a_normal_exit_does(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered, no newline"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "joined"


def test_the_cli_exits_with_its_code_and_its_output(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "neural_arch.cli", "no-such-command"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "unknown subcommand 'no-such-command'" in done.stderr
    done = subprocess.run([sys.executable, "-m", "neural_arch.cli", "env"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr


ASKED = """
import atexit, sys
from pathlib import Path
from neural_arch.utils.fast_exit import exit_when_asked, request_fast_exit
atexit.register(lambda: Path(sys.argv[1]).write_text("ran"))
if sys.argv[2] == "ask":
    request_fast_exit()
exit_when_asked(5)
"""


def test_exit_when_asked_is_sys_exit_unless_the_script_asked(tmp_path):
    for mode in ("ask", "no"):
        mark = tmp_path / mode
        done = subprocess.run(
            [sys.executable, "-c", ASKED, str(mark), mode], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 5 and mark.read_text() == "ran", (mode, done.stderr)


def test_a_launched_training_run_exits_0_with_its_summary_on_the_console(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "neural_arch.cli", "train", "--config", "configs/tiny.yaml", "--nproc-per-node", "2"]
        + ["--set", "training.steps=2", f"run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=170,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[rank 0]   step time per rank" in done.stdout  # the summary's last line, through the log pump
    console = (tmp_path / "run" / "logs" / "console" / "rank_0.log").read_text()
    assert "step time per rank" in console  # the pump drained before the worker left
