"""The seeds' code snippets run as written: with plain ``python``, and on 2 ranks through
our launcher (in the seeds' argument order) and through torchrun.

Run: ``.venv/bin/python -m pytest tests/test_seed_scripts.py``
The scripts live in tests/seed_scripts/ (verbatim from seed 004; fill-ins are marked).
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.multiproc import free_port

pytestmark = pytest.mark.multiprocess  # every test here spawns ranks or runs the CLI

SEEDS = Path(__file__).parent / "seed_scripts"


# How a script is started: plain python (1 process), our launcher, torchrun (2 ranks each).
STARTERS = ["python", "launcher", "torchrun"]


def run_script(name: str, starter: str) -> str:
    script = str(SEEDS / name)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if starter == "python":
        cmd = [sys.executable, script]
    elif starter == "launcher":  # the seeds' own order (script, then options), kept for this entry point
        cmd = [sys.executable, "-m", "neural_arch.distributed.launcher", script, "--nproc_per_node=2", "--backend=gloo"]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            script,
        ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{name} via {starter} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("starter", STARTERS)
def test_basic_functionality(starter):
    ranks = 1 if starter == "python" else 2
    out = run_script("basic_functionality.py", starter)
    # The seed pins world_size=1, rank=0, so each process is its own world of one.
    assert out.count("World size: 1, Rank: 0") == ranks
    assert out.count("All-reduce result: tensor([1., 2., 3.])") == ranks
    assert out.count("Sampler generated 100 indices") == ranks


@pytest.mark.parametrize("starter", STARTERS)
def test_communication_primitives(starter):
    ranks = 1 if starter == "python" else 2
    out = run_script("communication_primitives.py", starter)
    reduced = "[1., 2., 3.]" if ranks == 1 else "[2., 4., 6.]"
    assert out.count(f"Reduced: tensor({reduced})") == ranks
    assert out.count(f"Gathered {ranks} tensors") == ranks
    assert out.count("Broadcast: tensor([1., 2., 3.])") == ranks
    assert out.count("Scattered shape: torch.Size([2, 3])") == ranks


@pytest.mark.parametrize("starter", STARTERS)
def test_training_template(starter):
    ranks = 1 if starter == "python" else 2
    out = run_script("training_template_cpu.py", starter)
    hashes = re.findall(r"rank (\d) weights ([0-9a-f]+)", out)
    assert sorted(int(r) for r, _ in hashes) == list(range(ranks))
    assert len({h for _, h in hashes}) == 1, f"ranks ended with different weights: {hashes}"
    want = template_reference(ranks)
    values = re.findall(r"rank 0 values (\[[^\]]*\])", out)  # rank 0 prints them; the hashes say all agree
    assert len(values) == 1, out
    np.testing.assert_allclose(json.loads(values[0]), want, rtol=0, atol=1e-6)  # float32


def template_reference(world: int) -> list[float]:
    """The template's training on one process: the same model and data (its fill-in, loaded
    without running main), each step a mean over the ``world`` samples the ranks would hold
    (torch's DistributedSampler order: randperm seeded with seed 0 + epoch), plain SGD."""
    spec = importlib.util.spec_from_file_location("template", SEEDS / "training_template_cpu.py")
    template = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(template)
    model = template.MyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    n = len(template.dataset)
    for epoch in range(template.num_epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
        for k in range(n // world):
            batch = order[k * world : (k + 1) * world]
            loss = sum(template.criterion(model(template.dataset[i]), template.targets) for i in batch) / world
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
