"""Issue 36's first acceptance test: no disk checkpoint at all, memory snapshots on, a rank SIGKILLed
20 times in one run through the real launcher, and the run ends bitwise equal to the uninterrupted one.

Run: ``.venv/bin/python -m pytest tests/training/test_memory_kills.py -q`` (2 and 4 gloo ranks
on 127.0.0.1 under ``python -m neural_arch.distributed.launcher``, i.e. ``neural-arch launch``;
about 3 min for 2 ranks and 6 min for 4 on two shared cores: each restart starts the ranks anew).

``tests/scripts/train_fault.py kills 20``: attempts 0 to 19 each SIGKILL one rank 1 to 3 steps
after their first step (rank and step drawn from a generator seeded with the attempt's number;
rank 0 included, so a push to the keeper dies half-sent too), attempt 20 runs to the end. The
float64 regression MLP, ``checkpoint.every_steps: 0`` (the trainer writes only the last step's
checkpoint), ``checkpoint.memory_every: 1``, 48 steps (20 attempts move at most 2 steps each:
every kill lands before the end). Proof that no checkpoint file was read: every restart says it
resumed from the launcher's keeper (rank 0's line, and the trainer's start line in its log), and
the only checkpoint the run ever wrote is the last step's, made after the last restart. The
reference is the same launcher run without kills or snapshots; the weights must be ``torch.equal``
at 2 and 4 ranks. (4 ranks are bitwise because our DDP wrapper keeps torch's first bucket layout
for good from 3 ranks on: a restart's fresh wrapper would otherwise sum its first step in another
order; tests/distributed/data_parallel/test_ddp_restart_layout.py shows it in isolation.)
"""

from __future__ import annotations

import re

import pytest
import torch

import neural_arch.distributed as nd
from tests.helpers.trainer_runs import BASE, launch_fault

KILLS = 20
STEPS = 48
ARGS = [*BASE, "--set", "checkpoint.every_steps=0", f"training.steps={STEPS}"]


def _weights(run) -> dict[str, torch.Tensor]:
    info, state = nd.load_checkpoint(run / "checkpoints")
    assert info.step == STEPS
    return state["model"]


@pytest.mark.multiprocess
@pytest.mark.long  # 2-5 minutes each
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("ranks", [2, 4])
def test_twenty_kills_resume_from_memory_bitwise(tmp_path, ranks):
    whole = launch_fault("none", 0, ranks, *ARGS, f"run.dir={tmp_path / 'whole'}", timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    run = tmp_path / "run"
    killed = launch_fault(
        "kills", KILLS, ranks, *ARGS, "checkpoint.memory_every=1", f"run.dir={run}", restarts=KILLS, timeout=900
    )
    out = killed.stdout + killed.stderr
    assert killed.returncode == 0, out[-5000:]
    assert len(re.findall(r"train_fault: attempt \d+ kills rank \d+", out)) == KILLS
    assert out.count("Restarting the group") == KILLS
    memory = re.findall(rf"resuming from step (\d+) of {STEPS} \(memory snapshot step (\d+) at 127\.0\.0\.1:", out)
    assert len(memory) == KILLS and all(a == b for a, b in memory), out[-5000:]
    assert "resuming from disk" not in out
    assert [p.name for p in (run / "checkpoints").glob("step_*")] == [f"step_{STEPS:08d}"]  # nothing else to read
    starts = [line for line in (run / "logs" / "rank_0.log").read_text().splitlines() if "start:" in line]
    assert len(starts) == KILLS + 1 and all("(resumed from step" in line for line in starts[1:])
    reference, weights = _weights(tmp_path / "whole"), _weights(run)
    assert reference.keys() == weights.keys() and all(v.dtype == torch.float64 for v in reference.values())
    differ = [name for name, value in reference.items() if not torch.equal(weights[name], value)]
    assert not differ, f"{differ} differ from the uninterrupted run ({ranks} ranks)"
