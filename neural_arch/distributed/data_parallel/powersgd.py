"""torch's PowerSGD hook, made safe on gloo and resumable bit for bit.

Use: through ``compression.attach`` (``ddp.compression: powersgd``); the trainer saves
``compressor.checkpoint_state()`` (a collective: every rank's error feedback is gathered to
rank 0) and calls ``compressor.load_state(state)`` on resume.

Three things torch's ``powerSGD_hook`` + ``PowerSGDState`` leave to the caller:
- gloo: the hook issues its P and Q all-reduces from future callbacks, which run on gloo's
  worker threads; with two buckets in flight the ranks enqueue them in different orders and
  gloo aborts ("Received data size doesn't match expected size"). On gloo each compressed
  bucket is therefore finished before the hook returns (communication is small by then).
- saving: the state (iteration, numpy RNG, P/Q memories, per-rank error feedback) is written
  as plain tensors and numbers, so checkpoints still load with ``weights_only=True``.
- resuming: the state is keyed by DDP bucket index, but a fresh DDP runs its first backward
  with all parameters in one bucket and only then rebuilds the buckets (in the order the
  gradients arrived, the same as in the first process). That first backward is split here
  into the saved buckets and each is compressed with its own state, in index order, exactly
  as the uninterrupted run compressed them. The saved layout (parameter positions per bucket)
  is checked; from the second backward on, DDP's buckets are the saved ones again.
A changed world size, rank or bucket size cannot continue the same error feedback: the
state is then reset (plain all-reduce for ``warmup`` steps, then compression afresh) and
``load_state`` says so.
"""

# No "from __future__ import annotations": DDP checks the hook's annotations against real types.
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook


class PowerSGDCompressor:
    """A ``PowerSGDState`` plus the bucket layout it belongs to (parameter positions per bucket)."""

    def __init__(self, module: torch.nn.Module, rank: int, warmup: int, bucket_mb: float) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.position = {p.data_ptr(): i for i, p in enumerate(self.params)}
        self.rank, self.warmup, self.bucket_mb = rank, warmup, float(bucket_mb)
        self.state = self._fresh()
        self.layout: dict[int, list[int]] = {}
        """Bucket index -> positions (in ``module.parameters()``) of its parameters, in bucket order."""

    def _fresh(self) -> PowerSGDState:
        # min_compression_rate=2 (torch's default): small or thin tensors go uncompressed.
        return PowerSGDState(process_group=None, matrix_approximation_rank=self.rank,
                             start_powerSGD_iter=self.warmup, use_error_feedback=True, warm_start=True, random_seed=0)

    @property
    def gloo(self) -> bool:
        return dist.get_backend() == "gloo"

    def positions(self, bucket: Any) -> list[int]:
        return [self.position[p.data_ptr()] for p in bucket.parameters()]

    def has_memory(self) -> bool:
        return bool(self.state.error_dict or self.state.p_memory_dict)

    def run(self, bucket: Any) -> torch.futures.Future:
        """torch's hook on one bucket; on gloo a compressed bucket is finished before returning."""
        compressing = self.state.iter >= self.state.start_powerSGD_iter
        fut = powerSGD_hook(self.state, bucket)
        return _done(fut.wait()) if compressing and self.gloo else fut

    def run_split(self, bucket: Any, found: list[int]) -> torch.futures.Future:
        """The first backward after a restart: compress each saved bucket inside ``bucket`` on its own."""
        grads = dict(zip(found, bucket.gradients()))
        parts = [i for i in sorted(self.layout) if set(self.layout[i]) <= set(found)]
        covered = sorted(q for i in parts for q in self.layout[i])
        if covered != sorted(found):
            raise RuntimeError(
                f"rank {dist.get_rank()}: the saved PowerSGD state does not fit this run's DDP buckets (saved "
                f"buckets {sorted(self.layout)} cover parameters {covered[:8]}..., this bucket holds {sorted(found)[:8]}...); "
                "resume with the same model and ddp settings, or start compression afresh with checkpoint.resume=none")
        last = max(self.layout)
        for index in parts:
            members = [grads[q] for q in self.layout[index]]
            flat = torch.cat([g.reshape(-1) for g in members])
            views = [v.view_as(g) for v, g in zip(flat.split([g.numel() for g in members]), members)]
            powerSGD_hook(self.state, _SavedBucket(flat, views, index, index == last)).wait()
            for g, v in zip(members, views):
                g.copy_(v)
        return _done(bucket.buffer())

    def checkpoint_state(self) -> dict[str, Any]:
        """Plain tensors and numbers; ``error`` holds every rank's error feedback on rank 0 (a collective)."""
        s = self.state
        _, keys, pos, has_gauss, cached = s.rng.get_state()
        return {
            "iter": int(s.iter), "rank": self.rank, "bucket_mb": self.bucket_mb, "world_size": dist.get_world_size(),
            "numel": sum(p.numel() for p in self.params),
            "layout": {i: torch.tensor(v, dtype=torch.long) for i, v in self.layout.items()},
            "p": {i: t.detach().cpu().clone() for i, t in s.p_memory_dict.items()},
            "q": {i: t.detach().cpu().clone() for i, t in s.q_memory_dict.items()},
            "rng": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                    "cached": float(cached)},
            "error": _gather({i: s.error_dict[i] for i in sorted(s.error_dict)}),
        }

    def load_state(self, saved: dict[str, Any]) -> Optional[str]:
        """Continue from ``checkpoint_state()``; a one-line reason when it cannot and compression restarts."""
        here = {"rank": self.rank, "bucket_mb": self.bucket_mb, "world_size": dist.get_world_size(),
                "numel": sum(p.numel() for p in self.params)}
        changed = {k: (saved.get(k), v) for k, v in here.items() if saved.get(k) != v}
        self.state, self.layout = self._fresh(), {}
        if changed:
            what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items())
            why = f"does not fit this run ({what})" if saved else "is missing (saved with another ddp.compression)"
            return (f"ddp.compression=powersgd: the checkpoint's PowerSGD state {why}; error feedback restarts: "
                    f"plain all-reduce for {self.warmup} steps, then PowerSGD afresh")
        device = self.params[0].device
        s, rng = self.state, saved["rng"]
        s.iter = int(saved["iter"])
        s.rng.set_state(("MT19937", rng["keys"].numpy().astype(np.uint32), rng["pos"], rng["has_gauss"], rng["cached"]))
        s.p_memory_dict = {int(i): t.to(device) for i, t in saved["p"].items()}
        s.q_memory_dict = {int(i): t.to(device) for i, t in saved["q"].items()}
        s.error_dict = {int(i): t.to(device) for i, t in saved["error"][dist.get_rank()].items()}
        self.layout = {int(i): t.tolist() for i, t in saved["layout"].items()}
        return None


def powersgd_hook(compressor: PowerSGDCompressor, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: PowerSGD on ``bucket``, with the bucket-layout bookkeeping described above."""
    found = compressor.positions(bucket)
    index = bucket.index()
    if compressor.layout.get(index) == found or not compressor.has_memory():
        compressor.layout[index] = found  # nothing remembered yet (warm-up), or the same bucket as before
        return compressor.run(bucket)
    return compressor.run_split(bucket, found)


class _SavedBucket:
    """The part of a GradBucket that ``powerSGD_hook`` reads, for one bucket of the saved layout."""

    def __init__(self, flat: torch.Tensor, views: list[torch.Tensor], index: int, last: bool) -> None:
        self._flat, self._views, self._index, self._last = flat, views, index, last

    def buffer(self) -> torch.Tensor:
        return self._flat

    def gradients(self) -> list[torch.Tensor]:
        return self._views

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._last


def _done(value: torch.Tensor) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(value)
    return fut


def _gather(local: dict[int, torch.Tensor]) -> list[dict[int, torch.Tensor]]:
    """Every rank's ``local`` on rank 0 (rank order); the other ranks get an empty list.
    The same keys and shapes on every rank: the buckets are the same everywhere."""
    world, me = dist.get_world_size(), dist.get_rank()
    out: list[dict[int, torch.Tensor]] = [{} for _ in range(world)] if me == 0 else []
    for i, t in local.items():
        parts = [torch.empty_like(t) for _ in range(world)] if me == 0 else None
        dist.gather(t.contiguous(), parts, dst=0)
        if parts is not None:
            for r, part in enumerate(parts):
                out[r][i] = part.cpu()
    return out
