"""The launcher command and the GPT corpus of the studies that launch real training jobs (not run on its own).

Use: ``subprocess.run(launcher(2, 1, "path/to/rank.py", *args))`` runs ``rank.py`` on 2 ranks
with one restart allowed; ``make_corpus(root)`` writes a byte corpus at ``root/corpus`` (and its
source snapshot at ``root/source``) for ``run.task=gpt`` jobs, and ``gpt_settings`` their model
and data settings. Used by recovery/hang_recovery.py, recovery/state.py, recovery/goodput.py,
checkpoint_stall/save_stall.py, memory/memory_limit.py and memory/memory_peak.py.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from neural_arch.apps.gpt.corpus import create_corpus

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: its ``neural_arch`` sources are the corpus."""


def launcher(ranks: int, restarts: int, *program: str) -> list[str]:
    """The launcher command every launched benchmark job runs (``python -m neural_arch.distributed.launcher``)."""
    return [
        sys.executable,
        "-m",
        "neural_arch.distributed.launcher",
        f"--nproc_per_node={ranks}",
        f"--max_restarts={restarts}",
        *program,
    ]


def make_corpus(root: Path) -> Path:
    """A byte corpus at ``root/corpus`` from a snapshot of this package's sources (``root/source``:
    a copy, so editing the package meanwhile does not make the corpus stale)."""
    shutil.copytree(ROOT / "neural_arch", root / "source", ignore=shutil.ignore_patterns("__pycache__"))
    return create_corpus(root / "corpus", [str(root / "source")], 0.05, 64)


def gpt_settings(d_model: int, layers: int, corpus: Path) -> list[str]:
    """The ``run.task=gpt`` model and data settings of the studies' GPT jobs (``make_corpus``'s
    corpus, context 64, one head per 64 channels): d_model 768 and 14 blocks is the 99M model."""
    return [
        "run.task=gpt",
        f"model.d_model={d_model}",
        f"model.n_layers={layers}",
        f"model.n_heads={d_model // 64}",
        "model.context=64",
        f"data.source={corpus.parent / 'source'}",
        f"data.path={corpus}",
        "data.val_fraction=0.05",
        "data.samples_per_epoch=512",
    ]
