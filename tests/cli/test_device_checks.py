"""Settings this machine's devices cannot run stop before anything starts: one line, exit 2.

Run: ``.venv/bin/python -m pytest tests/cli/test_device_checks.py -q``
``training.precision=fp16`` and ``training.backend=nccl`` need CUDA; the shipped GPU recipe
(nccl, 8 processes) on a CPU machine used to create its data, start 8 workers on 2 cores and
restart them all. ``--nproc-per-node 64`` on a small machine is refused the same way. Each
case: exit 2, one line on stderr, no data created, no run directory filled.
"""

import pytest
import torch

from tests.helpers.cli import cli

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="these settings run on a machine with a CUDA GPU")


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--config", "tiny", "--set", "training.precision=fp16"], "training.precision=fp16 needs a CUDA GPU"),
        (["--config", "tiny", "--set", "training.backend=nccl"], "training.backend=nccl needs CUDA GPUs"),
        (["--config", "gpt_gpu", "--create-data"], "training.backend=nccl needs CUDA GPUs"),
        (["--config", "tiny", "--nproc-per-node", "1000"], "more processes than this machine can run"),
    ],
    ids=["fp16", "nccl", "gpu-recipe", "nproc-1000"],
)
def test_refused_in_one_line_before_anything_starts(tmp_path, args, said):
    run, data = tmp_path / "run", tmp_path / "data"
    proc = cli("train", *args, "--set", f"run.dir={run}", f"data.path={data}", timeout=100, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and said in proc.stderr, proc.stderr
    assert not data.exists() and not (run / "checkpoints").exists()
