"""``exit_now``: a normal exit's effects (threads joined, atexit handlers run, streams flushed,
the exit code), without the interpreter's teardown.

Run: ``.venv/bin/python -m pytest tests/utils/test_fast_exit.py``
"""

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
