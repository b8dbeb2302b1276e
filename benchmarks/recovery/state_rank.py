"""One restarted rank restoring the training state, timed: ``state_rank.py MODE RUN_DIR STEP``.

Started by ``benchmarks/recovery/state.py`` (a fresh process per measurement, as after a real
failure: nothing allocated, no optimizer state yet), which sends the training settings and the
keeper's address as one JSON line on stdin. ``train`` first trains ``RUN_DIR/trained`` (world
size 1) with a memory snapshot and a disk checkpoint at step STEP. Every other mode builds the
run's components, then restores step STEP:

- ``mapped``: ``MemorySnapshots.restore_training``, the keeper's own memory file opened and mapped;
- ``bytes``: the same, with the keeper's file refused, so the part comes over the connection;
- ``disk`` / ``disk-cold``: the trainer's disk resume (``resume_from`` the step directory:
  manifest sha256, ``torch.load``, restore); ``disk-cold`` first evicts the step's files from
  the page cache (``POSIX_FADV_DONTNEED``), as on a node that did not write them.

Prints one JSON line: the seconds of the whole restore and of its phases, the state's bytes, and
a sha256 of every restored tensor (weights and optimizer state), which must agree across modes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

import neural_arch.distributed.checkpoint.replicated as replicated
from neural_arch.distributed.checkpoint.keeper_protocol import KeeperAddress, KeeperClient, KeeperError
from neural_arch.distributed.launcher.job_token import JobToken
from neural_arch.training.config import load_config
from neural_arch.training.memory_snapshot import MemorySnapshots
from neural_arch.training.run_start import build_components, resume_from
from neural_arch.training.trainer import train


class _BytesOnly(KeeperClient):
    """A client whose keeper file cannot be opened here: the restore falls back to the bytes."""

    def open(self, step: int, part: int) -> int:
        raise KeeperError("refused by the benchmark")


def _timed(spent: dict[str, float], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

    return wrapper


def _evict(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _digest(components: Any) -> tuple[str, int]:
    """sha256 over the weights and every optimizer state tensor, and their bytes."""
    digest, size = hashlib.sha256(), 0
    tensors = list(components.model.state_dict().values())
    for state in components.optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    for tensor in tensors:
        data = tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
        digest.update(data)
        size += len(data)
    return digest.hexdigest(), size


def main() -> None:
    mode, run_dir, step = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    settings = json.loads(sys.stdin.readline())
    address = KeeperAddress(settings["host"], settings["port"], JobToken(settings["token"], "the benchmark"))
    if mode == "train":
        cfg = load_config(None, [*settings["train"], f"run.dir={run_dir / 'trained'}"])
        train(cfg, callbacks=[MemorySnapshots(KeeperClient(address), every=step)], create_data=False)
        return
    cfg = load_config(None, [*settings["train"], f"run.dir={run_dir / mode}"])
    components = build_components(cfg, create_data=False)
    spent: dict[str, float] = {}
    components.restore = _timed(spent, "restore", components.restore)  # type: ignore[method-assign]
    start = time.perf_counter()
    if mode in ("mapped", "bytes"):
        client = (KeeperClient if mode == "mapped" else _BytesOnly)(address)
        restored = MemorySnapshots(client, every=step).restore_training(components)
    else:
        step_dir = run_dir / "trained" / "checkpoints" / f"step_{step:08d}"
        if mode == "disk-cold":
            _evict(step_dir)
            start = time.perf_counter()
        replicated.verified_manifest = _timed(spent, "verify", replicated.verified_manifest)  # type: ignore[assignment]
        restored = resume_from(components, str(step_dir), step_dir.parent)
    total = time.perf_counter() - start
    assert restored == step, f"{mode}: restored step {restored}, not {step}"
    phases = {"load": total - sum(spent.values()), **spent}
    digest, size = _digest(components)
    print(json.dumps({"mode": mode, "total": total, "phases": phases, "digest": digest, "bytes": size}), flush=True)


if __name__ == "__main__":
    main()
