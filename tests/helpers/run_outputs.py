"""What a finished training run left in its ``run.dir``, read back, and parameters compared.

Use: ``assert_params(final_params(run), final_params(reference), atol=0)`` (bitwise) or
``atol=1e-10``; ``metrics(run)`` -> the rows of metrics.jsonl; ``sample_ids(run, 11)`` ->
the sample ids each step from 11 on trained on (runs with ``logging.record_samples=true``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from neural_arch.distributed.checkpoint import load_checkpoint, with_whole_model


def final_params(run_dir: Path) -> dict[str, torch.Tensor]:
    """The whole model of the run's newest checkpoint (a sharded checkpoint's too)."""
    found = load_checkpoint(run_dir / "checkpoints")
    assert found is not None, f"no checkpoint in {run_dir}"
    return with_whole_model(found[0].path, found[1])["model"]


def metrics(run_dir: Path, perf: bool = False) -> list[dict[str, Any]]:
    """Every row of the run's metrics.jsonl, in order; without the ``perf/*`` columns (times,
    memory: they differ between any two runs) unless ``perf``."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows if perf else [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in rows]


def sample_ids(run: Path, first_step: int) -> dict[int, list[int]]:
    """step -> the sample ids every rank recorded for it, from ``first_step`` on."""
    per_step: dict[int, list[int]] = {}
    for log in (run / "logs").glob("samples_rank_*.jsonl"):
        for line in log.read_text().splitlines():
            row = json.loads(line)
            if row["step"] >= first_step:
                per_step.setdefault(row["step"], []).extend(row["ids"])
    return per_step


def assert_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float) -> None:
    """The same parameter names, and values bitwise equal (``atol=0``) or within ``atol``."""
    assert a.keys() == b.keys()
    for k in a:
        if atol == 0:
            assert torch.equal(a[k], b[k]), f"{k} differs (max {float((a[k] - b[k]).abs().max()):.3e})"
        else:
            np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), rtol=0, atol=atol, err_msg=k)
