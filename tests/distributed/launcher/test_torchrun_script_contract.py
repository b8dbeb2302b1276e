"""A script runs under our launcher as under torchrun (``python -u script.py``): the same
``__file__``, ``sys.argv``, ``sys.path[0]``, ``__main__``, imported modules, OpenMP threads, exit
codes, restarts and signals. Each test runs the same small script under torchrun (``python -m
torch.distributed.run``) and under ours, and compares what the script recorded.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_torchrun_script_contract.py -q``
(2 workers per job, scripts without torch where the point allows; 14 tests, about 5 min on a
loaded 2-core machine).

What our own code tells the launcher (the trainer's stop after saving, its usage errors) goes
through the launcher's channel (launcher/channel.py), never through an exit code a script could
use: the last tests check that both are still recognised, and a script's own codes are not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli import LAUNCHER

pytestmark = pytest.mark.multiprocess  # every test starts both launchers with 2 workers

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
LAUNCHERS = {"torchrun": TORCHRUN, "ours": LAUNCHER}


def made(folder: Path) -> Path:
    """``folder``, created: where one launcher's run of a script records what it saw."""
    folder.mkdir()
    return folder


def succeeded_under_both(tmp_path: Path, name: str, script: str) -> dict[str, Path]:
    """Run ``script`` (saved as ``name``) with its folder as argument under each launcher; each
    launcher's folder, once both exited 0."""
    (tmp_path / name).write_text(script)
    folders = {}
    for which in LAUNCHERS:
        folders[which] = made(tmp_path / which)
        proc = run(which, tmp_path, name, str(folders[which]))
        assert proc.returncode == 0, (which, proc.stdout + proc.stderr)
    return folders


def run(
    which: str, tmp_path: Path, *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``LAUNCHER --nproc_per_node=2 ARGS`` in ``cwd`` (default ``tmp_path``), as a user starts it."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # each launcher sets its own
    return subprocess.run(
        [*LAUNCHERS[which], "--nproc_per_node=2", *args],
        cwd=cwd or tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def records(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("rank_*.json"))}


def attempts(path: Path) -> list[str]:
    """The lines the script appended, one per rank and attempt (``RANK RESTART_COUNT``), sorted."""
    return sorted(path.read_text().split("\n")[:-1]) if path.exists() else []


# The script's start as python leaves it: it records before importing anything, then checks that
# a class it defines travels to a spawn-context child and back, and that its own folder is found
# through __file__ after a chdir.
START = """
import sys
modules = sorted(sys.modules)
import json, os, pickle
import multiprocessing as mp
from pathlib import Path

class Payload:
    def __init__(self, value):
        self.value = value

def child(payload, out):
    Path(out).write_text(str(payload.value * 2))

if __name__ == "__main__":
    out = Path(sys.argv[1]).absolute()
    main = sys.modules["__main__"]
    record = {
        "modules": modules,
        "file": __file__,
        "argv": sys.argv,
        "orig_argv": sys.orig_argv[1:],
        "path0": sys.path[0],
        "path": sys.path,
        "cwd_on_path": os.getcwd() in sys.path,
        "name": __name__,
        "main_is_this": main.__dict__ is globals(),
        "main_keys": sorted(k for k in vars(main) if k.startswith("__")),
        "spec": repr(__spec__),
        "stdout_is_original": sys.stdout is sys.__stdout__,
        "pickled_back": pickle.loads(pickle.dumps(Payload(3))).value,
    }
    done = out / f"child_{os.environ['RANK']}.txt"
    proc = mp.get_context("spawn").Process(target=child, args=(Payload(21), str(done)))
    proc.start()
    proc.join()
    record["spawn_child"] = (proc.exitcode, done.read_text())
    os.chdir("/")
    record["data_after_chdir"] = (Path(__file__).parent / "data.txt").read_text()
    (out / f"rank_{os.environ['RANK']}.json").write_text(json.dumps(record))
"""


@pytest.fixture(scope="module")
def started(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """What the script recorded at its start under each launcher, run as ``sub/start.py a -b``
    from the folder above ``sub`` (a relative path, the way users type it)."""
    base = tmp_path_factory.mktemp("start")
    (base / "sub").mkdir()
    (base / "sub" / "start.py").write_text(START)
    (base / "sub" / "data.txt").write_text("found")
    found = {}
    for which in LAUNCHERS:  # the same command in the same folder: one after the other
        (base / "out").mkdir()
        proc = run(which, base, "sub/start.py", "out", "-b")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found[which] = records((base / "out").rename(base / which))
        assert set(found[which]) == {"rank_0", "rank_1"}, proc.stdout + proc.stderr
    return found


def test_file_argv_and_path_are_pythons(started):
    ours, theirs = started["ours"]["rank_1"], started["torchrun"]["rank_1"]
    keys = ("file", "argv", "orig_argv", "path0", "path", "cwd_on_path", "name", "main_is_this", "main_keys", "spec")
    for key in keys:
        assert ours[key] == theirs[key], (key, ours[key], theirs[key])
    assert Path(ours["file"]).is_absolute() and ours["file"].endswith("/sub/start.py")
    assert ours["argv"][0] == "sub/start.py" and ours["argv"][2:] == ["-b"]  # the path as given
    assert ours["path0"] == str(Path(ours["file"]).parent) and not ours["cwd_on_path"]
    assert ours["data_after_chdir"] == theirs["data_after_chdir"] == "found"


def test_nothing_is_imported_before_the_script(started):
    for rank in ("rank_0", "rank_1"):
        ours, theirs = set(started["ours"][rank]["modules"]), set(started["torchrun"][rank]["modules"])
        assert ours == theirs, f"only ours: {sorted(ours - theirs)}; only torchrun's: {sorted(theirs - ours)}"
        assert not any(name.split(".")[0] in ("torch", "neural_arch") for name in ours)


def test_main_module_pickles_and_spawns(started):
    for which in LAUNCHERS:
        record = started[which]["rank_0"]
        assert record["pickled_back"] == 3 and record["spawn_child"] == [0, "42"], (which, record)
        assert record["stdout_is_original"], which


THREADS = """
import json, os, sys
os.environ["OMP_NUM_THREADS"] = "2"
import torch
with open(f"{sys.argv[1]}/rank_{os.environ['RANK']}.json", "w") as f:
    json.dump({"threads": torch.get_num_threads()}, f)
"""


def test_a_script_sets_its_threads_before_importing_torch(tmp_path):
    for which, out in succeeded_under_both(tmp_path, "threads.py", THREADS).items():
        assert {r["threads"] for r in records(out).values()} == {2}, (which, records(out))


MODULE = """
import json, os, sys
modules = sorted(sys.modules)
if __name__ == "__main__":
    record = {"modules": modules, "argv": sys.argv, "path0": sys.path[0], "file": __file__, "spec": __spec__.name}
    with open(f"{sys.argv[1]}/rank_{os.environ['RANK']}.json", "w") as f:
        json.dump(record, f)
"""


def test_a_module_runs_as_python_m_runs_it(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "job.py").write_text(MODULE)
    found = {}
    for which in LAUNCHERS:  # the same command in the same folder: one after the other
        (tmp_path / "out").mkdir()
        proc = run(which, tmp_path, "-m", "pkg.job", "out")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        found[which] = records((tmp_path / "out").rename(tmp_path / which))["rank_0"]
    assert found["ours"] == found["torchrun"], found
    assert found["ours"]["path0"] == str(tmp_path) and found["ours"]["spec"] == "pkg.job"


HOOKED = """
import sys
sys.excepthook = lambda kind, value, tb: print(f"own hook: {kind.__name__}: {value}", file=sys.stderr)
raise ValueError("bad input")
"""


def test_a_scripts_own_excepthook_reports_its_error(tmp_path):
    (tmp_path / "hooked.py").write_text(HOOKED)
    for which in LAUNCHERS:
        proc = run(which, tmp_path, "--max-restarts=0", "hooked.py")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "own hook: ValueError: bad input" in proc.stdout + proc.stderr, (which, proc.stdout + proc.stderr)
    # Ours records it all the same: the summary quotes the traceback.
    assert 'hooked.py", line 4, in <module>' in proc.stderr, proc.stderr


# Rank 1 exits with the code of its attempt's place in argv[2] (attempt 0: the first), once rank 0
# has counted the attempt too (a failed rank's peers are stopped at once); then both succeed.
EXITS = """
import os, sys, time
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(sys.argv[1], "a") as f:
    f.write(f"{os.environ['RANK']} {attempt}\\n")
codes = [int(code) for code in sys.argv[2].split(",")]
if os.environ["RANK"] == "1" and int(attempt) < len(codes):
    while f"0 {attempt}" not in open(sys.argv[1]).read().splitlines():
        time.sleep(0.02)
    sys.exit(codes[int(attempt)])
"""


def test_a_scripts_exit_codes_are_failures_restarted_as_torchrun_restarts_them(tmp_path):
    """130 and 143 are not a stop asked for, 2 not a usage error of ours: each is restarted."""
    (tmp_path / "exits.py").write_text(EXITS)
    for which in LAUNCHERS:
        log = tmp_path / f"{which}.txt"
        proc = run(which, tmp_path, "--max-restarts=3", "exits.py", str(log), "130,143,2")
        assert proc.returncode == 0, (which, proc.stdout + proc.stderr)
        assert attempts(log) == sorted(f"{rank} {a}" for a in range(4) for rank in (0, 1)), which
        assert "as asked" not in proc.stderr and "usage" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("code", [143, 2])
def test_restarts_end_at_max_restarts_with_the_scripts_code_in_the_summary(tmp_path, code):
    (tmp_path / "exits.py").write_text(EXITS)
    for which in LAUNCHERS:
        log = tmp_path / f"{which}.txt"
        proc = run(which, tmp_path, "--max-restarts=1", "exits.py", str(log), f"{code},{code}")
        assert proc.returncode == 1, (which, proc.stdout + proc.stderr)
        assert attempts(log) == ["0 0", "0 1", "1 0", "1 1"], which
    assert f"exited with code {code}" in proc.stderr and "job failed after 2 attempt(s)" in proc.stderr, proc.stderr


# What our trainer does (training/stop.py, cli/usage.py), by hand: say it through the channel, then exit.
SAYS = """
import os, sys, time
with open(sys.argv[1], "a") as f:
    f.write(f"{os.environ['RANK']} {os.environ['TORCHELASTIC_RESTART_COUNT']}\\n")
if os.environ["RANK"] == "1":
    while "0 0" not in open(sys.argv[1]).read().splitlines():
        time.sleep(0.02)
    from neural_arch.distributed.launcher.channel import STOP, tell
    if sys.argv[2] == "stop":
        tell(STOP, "15")
        sys.exit(143)
    from neural_arch.cli.usage import print_usage_error
    sys.exit(print_usage_error("neural-arch train", "run.dir is held by another job"))
time.sleep(60)
"""


def test_our_trainers_stop_and_usage_error_are_still_not_restarted(tmp_path):
    (tmp_path / "says.py").write_text(SAYS)
    stop = run("ours", tmp_path, "--max-restarts=3", "says.py", str(tmp_path / "stop.txt"), "stop")
    assert stop.returncode == 143, stop.stdout + stop.stderr
    assert attempts(tmp_path / "stop.txt") == ["0 0", "1 0"] and "stopped on SIGTERM as asked" in stop.stderr
    usage = run("ours", tmp_path, "--max-restarts=3", "says.py", str(tmp_path / "usage.txt"), "usage")
    assert usage.returncode == 2, usage.stdout + usage.stderr
    assert attempts(tmp_path / "usage.txt") == ["0 0", "1 0"]
    assert "not restarted: rank(s) 1 exited with code 2" in usage.stderr, usage.stderr


# Rank 1 handles SIGUSR2 itself and waits; rank 0 fails once rank 1 is ready.
OWN_SIGNAL = """
import os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
if os.environ["RANK"] == "1":
    signal.signal(signal.SIGUSR2, lambda *_: (out / "handler_ran").touch())
    (out / "ready").touch()
    time.sleep(60)
while not (out / "ready").exists():
    time.sleep(0.05)
time.sleep(0.5)
sys.exit(1)
"""


def test_a_peer_failure_does_not_run_the_scripts_own_signal_handler(tmp_path):
    (tmp_path / "own_signal.py").write_text(OWN_SIGNAL)
    for which in LAUNCHERS:
        out = made(tmp_path / which)
        options = ["--log-dir", str(out / "logs")] if which == "ours" else []
        proc = run(which, tmp_path, "--max-restarts=0", *options, "own_signal.py", str(out))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert (out / "ready").exists() and not (out / "handler_ran").exists(), which
    # Ours still has rank 1 write its stacks before stopping it (stacks.py).
    assert "most recent call first" in (tmp_path / "ours" / "logs" / "rank_1.log").read_text()


# Each rank starts a spawn-context daemon child that would sleep for a minute; python ends it at
# exit (multiprocessing's exit handler terminates daemon children), and the child says so. A
# spawn-context program also has multiprocessing's resource tracker, which lives until the
# script's process exits, holding its stderr.
SPAWN_CHILD = """
import multiprocessing as mp
import os, signal, sys, time
from pathlib import Path

def child(out):
    signal.signal(signal.SIGTERM, lambda *_: (out.write_text("terminated at exit"), os._exit(0)))
    (out.parent / (out.name + ".ready")).write_text("")
    time.sleep(60)

if __name__ == "__main__":
    out = Path(sys.argv[1])
    mine = out / f"child_{os.environ['RANK']}"
    proc = mp.get_context("spawn").Process(target=child, args=(mine,), daemon=True)
    proc.start()
    while not (out / (mine.name + ".ready")).exists():  # the child's handler is set
        time.sleep(0.02)
"""


def test_a_script_with_a_spawn_child_ends_it_as_python_would(tmp_path):
    for which, out in succeeded_under_both(tmp_path, "spawn_child.py", SPAWN_CHILD).items():
        ended = [(out / f"child_{rank}").read_text() for rank in (0, 1)]
        assert ended == ["terminated at exit"] * 2, which  # by the script's exit handlers, as under python


# A process of the script's that outlives it holds the pump's pipes (as a spawn-context
# program's resource tracker does until the worker exits): the worker's last step must not wait
# for the pump to end, only until it has read what the worker wrote (it waited up to 10 s).
HOLDER = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
import worker
with worker.LauncherImports():
    from neural_arch.distributed.launcher.output import OutputTee
tee = OutputTee(worker.Path(sys.argv[2]), (False, False), ("", ""))
holder = subprocess.Popen(["sleep", "600"])  # inherits fds 1 and 2: the pump's pipes
print("the worker's last line", flush=True)
worker.close_output(tee, wait=600)  # returns once the line is read, not when the pump ends
print(holder.poll() is None, file=open(sys.argv[3], "w"))
holder.kill()
holder.wait()
tee.pump.wait(timeout=60)  # the pipes closed: the pump ends, its lines all written
"""


def test_the_worker_exits_without_waiting_for_its_scripts_children(tmp_path):
    from neural_arch.distributed.launcher.worker import HERE

    (tmp_path / "holder.py").write_text(HOLDER)
    log, said = tmp_path / "rank_0.log", tmp_path / "holder_alive"
    # A close that waited for the pump's end would wait for the holder: 600 s, past this timeout.
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "holder.py"), str(HERE), str(log), str(said)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert said.read_text() == "True\n"  # returned while the holder still held the pipes
    assert "the worker's last line" in log.read_text()  # and after the pump had read it


STAMP = """#!/bin/sh
echo "$$ $PPID" > "$1/pids_$RANK"
"""


def test_a_no_python_program_is_the_worker_itself(tmp_path):
    """As torchrun starts it: the program is the process the launcher started (no Python wrapper
    waits around it, nor starts before it: the 2.5 s the wrapper spent importing torch)."""
    program = tmp_path / "stamp.sh"
    program.write_text(STAMP)
    program.chmod(0o755)
    for which in LAUNCHERS:
        out = made(tmp_path / which)
        start = time.monotonic()
        proc = subprocess.Popen(
            [*LAUNCHERS[which], "--nproc_per_node=2", "--no-python", str(program), str(out)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, output
        for rank in (0, 1):
            pid, parent = (int(n) for n in (out / f"pids_{rank}").read_text().split())
            assert parent == proc.pid, (which, "the program's parent is not the launcher")
        print(which, f"{time.monotonic() - start:.2f} s")
