"""What a checkpoint holds, and per-rank random number streams.

Used by trainer.py: ``seed_rank(seed, rank, step)``, ``capture_rng()`` /
``restore_rng(state)``. All values are plain tensors, numbers and lists, so checkpoints
load with ``torch.load(weights_only=True)``.

Why re-derive: a run resumed on the same number of ranks restores every rank's exact RNG
state. On a different number of ranks the old per-rank streams have no meaning, so each
rank's stream is derived from (seed, rank, step): deterministic, and distinct per rank.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_rank(seed: int, rank: int, step: int = 0) -> None:
    """Seed torch, numpy and random for ``rank`` at ``step`` (distinct streams per rank)."""
    derived = (seed * 1_000_003 + rank * 7_919 + step) % (2**63 - 1)
    torch.manual_seed(derived)
    np.random.seed(derived % (2**32))
    random.seed(derived)


def capture_rng() -> dict[str, Any]:
    """This rank's RNG states (torch CPU, CUDA, numpy, random) as checkpoint-safe values."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "random": {"version": version, "internal": list(internal), "gauss": gauss},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Inverse of ``capture_rng``."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    r = state["random"]
    random.setstate((r["version"], tuple(r["internal"]), r["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
