"""Warm spares (``--warm-spares``, launcher/warm.py): a restart's workers start from processes that
already imported torch, supervised as cold workers are, and nothing is left when the job ends.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_warm_spares.py -q``
"""

import os
import subprocess
from pathlib import Path

import pytest

from neural_arch.distributed.launcher.warm import differs_late
from tests.helpers.cli import LAUNCHER

# Each rank says whether it is a spare (its command line is the spare's) and whether torch was
# imported before the script ran. On the first attempt rank 1 waits until the launcher's next two
# spares exist (they start launcher/warm.py's REFILL_DELAY after the group; a spare's
# last word is the launcher's pid, every rank's parent), then dies by SIGKILL.
SCRIPT = """
import os, signal, sys, time
preloaded = "torch" in sys.modules
import torch
import neural_arch.distributed as nd
nd.init_process_group()
rank, attempt = nd.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
spare = b"--warm-spare" in open("/proc/self/cmdline", "rb").read()
print(f"rank {rank} attempt {attempt} spare={spare} preloaded={preloaded}", flush=True)

def spares():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        if b"--warm-spare" in cmd and cmd[-2] == str(os.getppid()).encode() and int(pid) != os.getpid():
            found.append(int(pid))
    return found

if attempt == 0 and rank == 1:
    deadline = time.monotonic() + 120
    while len(spares()) < 3 and time.monotonic() < deadline:  # rank 0 and the two new spares
        time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)
total = torch.full((3,), float(rank + 1), dtype=torch.float64)
total = nd.all_reduce(total)
print(f"rank {rank} attempt {attempt} sum {total.tolist()}", flush=True)
"""


def test_only_per_attempt_variables_may_differ_from_a_spares_start():
    started = {"PATH": "/bin", "OMP_NUM_THREADS": "1", "NEURAL_ARCH_ATTEMPT": "a", "TORCHELASTIC_RUN_ID": "x"}
    later = {**started, "RANK": "1", "MASTER_PORT": "29500", "NEURAL_ARCH_ATTEMPT": "b", "TORCHELASTIC_ERROR_FILE": "e"}
    assert differs_late(started, later) == []
    assert differs_late(started, {**later, "OMP_NUM_THREADS": "2"}) == ["OMP_NUM_THREADS"]
    assert differs_late(started, {**later, "LD_PRELOAD": "libjemalloc.so"}) == ["LD_PRELOAD"]
    without = dict(later)
    del without["PATH"]
    assert differs_late(started, without) == ["PATH"]


def spare_processes(launcher_pid: int) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--warm-spare" in cmd and cmd[-2] == str(launcher_pid).encode():
            found.append(int(pid))
    return found


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_killed_rank_restarts_from_spares_with_torch_imported_and_none_is_left(tmp_path):
    script = tmp_path / "kill_once.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    launcher = subprocess.Popen(
        [*LAUNCHER, "--nproc_per_node=2", "--max_restarts=1", "--warm-spares", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    out, err = launcher.communicate(timeout=280)
    assert launcher.returncode == 0, out + err
    assert "rank 1 (host" in err and "SIGKILL" in err and "attempt 2 of 2" in err, err
    for rank in (0, 1):
        assert f"rank {rank} attempt 1 spare=True preloaded=True" in out, out
        assert f"rank {rank} attempt 1 sum [3.0, 3.0, 3.0]" in out, out
    assert spare_processes(launcher.pid) == []
