"""The room an asynchronous save's staging copy has: read from /proc and the memory cgroup.

Run: ``.venv/bin/python -m pytest tests/distributed/checkpoint/test_staging_room.py -q``
Fake /proc and cgroup folders (v1, v2, none) check the arithmetic; one real memory cgroup (root
with cgroup v1 or v2 memory control, else skipped with the reason) checks that a process near its
limit is told its copy does not fit, and one far from it that it does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from neural_arch.distributed.checkpoint.staging_room import SLACK, StagingRoom, copy_bytes

MiB = 1 << 20


def fake_proc(root: Path, cgroup_line: str, available_mib: int, hwm_mib: int = 100, rss_mib: int = 100) -> Path:
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal: 99999999 kB\nMemAvailable: {available_mib * 1024} kB\n")
    (proc / "self" / "status").write_text(f"VmHWM:\t{hwm_mib * 1024} kB\nVmRSS:\t{rss_mib * 1024} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    return proc


def write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def test_without_a_cgroup_limit_the_room_is_mem_available_less_the_growth_back_to_the_peak(tmp_path):
    proc = fake_proc(tmp_path, "0::/", available_mib=1000, hwm_mib=700, rss_mib=400)
    room = StagingRoom(proc, tmp_path / "cgroup")
    assert room.host_room() == (1000 - 300) * MiB  # the process grows back 300 MiB while the copy lives
    assert room.shortfall(500 * MiB) is None
    assert "700 MiB of host memory left" in room.shortfall(650 * MiB)


def test_a_v1_memory_cgroup_limits_the_room_counting_its_reclaimable_page_cache(tmp_path):
    proc = fake_proc(tmp_path, "9:memory:/job/rank1\n8:cpu,cpuacct:/", available_mib=20000)
    group = tmp_path / "cgroup" / "memory" / "job" / "rank1"
    write(group, memory_limit_in_bytes=str(1400 * MiB), memory_usage_in_bytes=str(1300 * MiB))
    (group / "memory.stat").write_text(f"cache 5\ntotal_inactive_file {50 * MiB}\n")
    room = StagingRoom(proc, tmp_path / "cgroup")
    assert room.host_room() == 150 * MiB
    assert room.shortfall(100 * MiB) is not None  # 100 MiB + 10 % + 64 MiB slack > 150 MiB
    assert room.shortfall(150 * MiB - SLACK - 20 * MiB) is None


def test_a_v2_memory_max_limits_the_room_and_max_means_no_limit(tmp_path):
    proc = fake_proc(tmp_path, "0::/job", available_mib=20000)
    group = tmp_path / "cgroup" / "job"
    write(group, memory_max=str(2000 * MiB), memory_current=str(1500 * MiB))
    (group / "memory.stat").write_text("anon 1\ninactive_file 0\n")
    assert StagingRoom(proc, tmp_path / "cgroup").host_room() == 500 * MiB
    (group / "memory.max").write_text("max\n")
    assert StagingRoom(proc, tmp_path / "cgroup").host_room() == 20000 * MiB


def test_nothing_readable_means_nothing_limits_the_copy(tmp_path):
    room = StagingRoom(tmp_path / "no-proc", tmp_path / "no-cgroup")
    assert room.host_room() is None and room.shortfall(1 << 50) is None


def test_copy_bytes_counts_every_tensor_once_per_leaf():
    state = {"w": torch.zeros(10, dtype=torch.float64), "nested": [torch.zeros(4, dtype=torch.float32), 3], "x": "y"}
    assert copy_bytes(state) == (10 * 8 + 4 * 4, 0)
    assert copy_bytes(None) == (0, 0)


PROBE = """
import sys, torch
from neural_arch.distributed.checkpoint.staging_room import StagingRoom
held = torch.ones(int(sys.argv[1]) << 20, dtype=torch.uint8)  # resident: the limit counts it
room = StagingRoom()
print(room.shortfall(int(sys.argv[2]) << 20))
"""


def memory_cgroup(limit: int) -> Path:
    """A fresh v1 memory cgroup with ``limit`` bytes, or a skip saying why there is none."""
    base = Path("/sys/fs/cgroup/memory")
    if os.geteuid() != 0 or not (base / "memory.limit_in_bytes").exists():
        pytest.skip("needs root and a cgroup v1 memory controller at /sys/fs/cgroup/memory")
    group = base / f"neural-arch-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    (group / "memory.limit_in_bytes").write_text(str(limit))
    return group


@pytest.mark.multiprocess
@pytest.mark.parametrize("held_mib, copy_mib, fits", [(300, 100, False), (40, 100, True)])
def test_a_process_in_a_real_memory_cgroup_is_told_whether_its_copy_fits(held_mib, copy_mib, fits):
    group = memory_cgroup(512 * MiB)
    try:
        # The child joins the group before it starts (so its imports count against the limit too).
        script = f'echo $$ > {group}/cgroup.procs && exec {sys.executable} -c "$0" {held_mib} {copy_mib}'
        out = subprocess.run(["sh", "-c", script, PROBE], capture_output=True, text=True, timeout=120)
    finally:
        group.rmdir()
    assert out.returncode == 0, out.stderr
    said = out.stdout.strip().splitlines()[-1]
    assert (said == "None") == fits, said
