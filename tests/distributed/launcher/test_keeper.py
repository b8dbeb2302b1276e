"""The launcher's snapshot keeper (launcher/keeper.py): its byte cap, the file it leaves each worker,
and a keeper that outlives a worker's restart under the real launcher (and is absent under torchrun).

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_keeper.py -q`` (the last two
start one worker under ``python -m neural_arch.distributed.launcher`` and under torchrun; about
25 s on two shared cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from neural_arch.distributed.checkpoint.keeper_file import KEEPER_FILE, read_keeper_file
from neural_arch.distributed.checkpoint.keeper_protocol import KeeperAddress
from neural_arch.distributed.checkpoint.staging_room import StagingRoom
from neural_arch.distributed.launcher.job_token import JobToken
from neural_arch.distributed.launcher.keeper import FALLBACK_CAPACITY, keeper_capacity, leaving_keeper_files
from neural_arch.training.memory_snapshot import MemorySnapshots
from tests.helpers.paths import SCRIPTS

PROBE = str(SCRIPTS / "keeper_probe.py")


def test_the_cap_is_a_quarter_of_the_free_memory_or_the_fallback(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 8000000 kB\nMemAvailable: 4000000 kB\n")
    assert keeper_capacity(StagingRoom(proc=tmp_path, cgroup=tmp_path / "none")) == 4000000 * 1024 // 4
    assert keeper_capacity(StagingRoom(proc=tmp_path / "none", cgroup=tmp_path / "none")) == FALLBACK_CAPACITY


def test_every_worker_folder_torch_makes_gets_the_keeper_file(tmp_path):
    address = KeeperAddress("127.0.0.1", 4321, JobToken("secret", "the test"))
    folders = {0: tmp_path / "attempt_0" / "0", 1: tmp_path / "attempt_0" / "1"}
    logs = SimpleNamespace(error_files={rank: str(f / "error.json") for rank, f in folders.items()} | {2: os.devnull})
    reify = leaving_keeper_files(lambda envs: logs, address)
    assert reify({}) is logs
    for folder in folders.values():
        assert (folder / KEEPER_FILE).stat().st_mode & 0o777 == 0o600
        found = read_keeper_file(folder)
        assert found is not None and (found.host, found.port, found.token.value) == ("127.0.0.1", 4321, "secret")


def test_without_a_keeper_the_run_takes_no_snapshots_and_says_so_once(capsys, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    assert MemorySnapshots.for_run(0) == [] and capsys.readouterr().out == ""
    assert MemorySnapshots.for_run(2) == []
    out = capsys.readouterr().out
    assert out.count("note: checkpoint.memory_every=2, but no snapshot keeper was found") == 1


def _probe(tmp_path: Path, *launcher: str) -> dict[str, dict]:
    cmd = [sys.executable, "-m", *launcher, "--nproc_per_node=1", "--max_restarts=1", PROBE, str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {p.stem: json.loads(p.read_text()) for p in sorted(tmp_path.glob("attempt_*.json"))}


@pytest.mark.multiprocess
def test_the_keeper_outlives_a_worker_restart_under_our_launcher(tmp_path):
    seen = _probe(tmp_path, "neural_arch.distributed.launcher")
    assert seen == {
        "attempt_0": {"found": True, "mode": "0o600", "newest": 5},
        "attempt_1": {"found": True, "mode": "0o600", "newest": 5},  # pushed by the attempt that died
    }


@pytest.mark.multiprocess
def test_a_worker_of_torchrun_finds_no_keeper(tmp_path):
    seen = _probe(tmp_path, "torch.distributed.run", "--standalone")
    assert seen == {"attempt_0": {"found": False, "mode": None, "newest": None}}
