"""Large freed blocks go back to the operating system once ``return_large_frees`` is set (glibc).

Run: ``.venv/bin/python -m pytest tests/training/test_malloc.py -q``
In a fresh interpreter: with the threshold at 4 MiB, 40 tensors of 6 MiB (240 MiB) are made,
freed, made again and freed; the resident memory afterwards is within 40 MiB of where it
started, i.e. the freed blocks were unmapped rather than kept in the heap.
"""

import ctypes
import subprocess
import sys

import pytest

PROBE = """
import torch
from pathlib import Path
from neural_arch.training.malloc import return_large_frees
def rss():
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024
assert return_large_frees(4 << 20)
before = rss()
for _ in range(2):
    blocks = [torch.ones(6 << 18) for _ in range(40)]  # 6 MiB each, touched
    del blocks
print(rss() - before)
"""


def _glibc() -> bool:
    """Whether this C library has ``mallopt`` (checked without calling it: this process keeps its policy)."""
    try:
        return hasattr(ctypes.CDLL(None), "mallopt")
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc(), reason="glibc's mallopt only")
def test_freed_large_blocks_leave_the_process():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) < 40 << 20, f"{int(proc.stdout) >> 20} MiB still resident"
