"""The seeds' code snippets run as written: with plain ``python`` and on 2 ranks.

Run: ``.venv/bin/python -m pytest tests/test_seed_scripts.py``
The scripts live in tests/seed_scripts/ (verbatim from seed 004; fill-ins are marked).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.multiproc import free_port

SEEDS = Path(__file__).parent / "seed_scripts"


def run_script(name: str, ranks: int) -> str:
    script = str(SEEDS / name)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if ranks == 1:
        cmd = [sys.executable, script]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
               "--master_addr=127.0.0.1", f"--master_port={free_port()}", script]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{name} on {ranks} rank(s) failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("ranks", [1, 2])
def test_basic_functionality(ranks):
    out = run_script("basic_functionality.py", ranks)
    # The seed pins world_size=1, rank=0, so each process is its own world of one.
    assert out.count("World size: 1, Rank: 0") == ranks
    assert out.count("All-reduce result: tensor([1., 2., 3.])") == ranks
    assert out.count("Sampler generated 100 indices") == ranks


@pytest.mark.parametrize("ranks", [1, 2])
def test_communication_primitives(ranks):
    out = run_script("communication_primitives.py", ranks)
    reduced = "[1., 2., 3.]" if ranks == 1 else "[2., 4., 6.]"
    assert out.count(f"Reduced: tensor({reduced})") == ranks
    assert out.count(f"Gathered {ranks} tensors") == ranks
    assert out.count("Broadcast: tensor([1., 2., 3.])") == ranks
    assert out.count("Scattered shape: torch.Size([2, 3])") == ranks


@pytest.mark.parametrize("ranks", [1, 2])
def test_training_template(ranks):
    out = run_script("training_template_cpu.py", ranks)
    hashes = re.findall(r"rank (\d) weights ([0-9a-f]+)", out)
    assert sorted(int(r) for r, _ in hashes) == list(range(ranks))
    assert len({h for _, h in hashes}) == 1, f"ranks ended with different weights: {hashes}"
