"""PowerSGD for ``DistributedDataParallel``, on gloo and NCCL, resumable bit for bit.

Use: through ``compression.attach`` (``ddp.compression: powersgd``); the trainer saves
``compressor.checkpoint_state()`` (a collective: every rank's error feedback is gathered to
rank 0) and calls ``compressor.load_state(state)`` on resume.

The step itself is ``low_rank.compress``. What this file adds around it:
- warm-up: the first ``warmup`` backward passes average exactly (DDP settles its buckets
  after the first one); the step counter advances on each backward's last bucket.
- gloo: a compressed bucket is finished inside the hook (its two all-reduces are issued from
  DDP's autograd thread, in bucket order on every rank; collectives issued from future
  callbacks run on gloo's worker threads, where two buckets in flight can reach the ranks in
  different orders and gloo aborts with "Received data size doesn't match expected size").
- saving: the state (step, per-bucket Q, per-rank error feedback, bucket layout) is written
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

import torch
import torch.distributed as dist

from neural_arch.distributed.data_parallel.low_rank import Memory, compress, first_memory, plan_bucket

FORMAT = 2
"""Version of ``checkpoint_state()``; 1 (no ``format`` key) held torch's ``PowerSGDState``."""


class PowerSGDCompressor:
    """Per-bucket PowerSGD memory, the step counter and the bucket layout they belong to."""

    def __init__(self, module: torch.nn.Module, rank: int, warmup: int, bucket_mb: float) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.position = {p.data_ptr(): i for i, p in enumerate(self.params)}
        self.rank, self.warmup, self.bucket_mb = rank, warmup, float(bucket_mb)
        self.iter = 0
        """Backward passes so far; compression starts when it reaches ``warmup``."""
        self.memory: dict[int, Memory] = {}
        self.layout: dict[int, list[int]] = {}
        """Bucket index -> positions (in ``module.parameters()``) of its parameters, in bucket order."""

    def positions(self, bucket: Any) -> list[int]:
        return [self.position[p.data_ptr()] for p in bucket.parameters()]

    def has_memory(self) -> bool:
        return bool(self.memory)

    def run(self, bucket: Any) -> torch.futures.Future:
        """Average ``bucket``: exactly during warm-up, else compressed (finished before returning)."""
        buffer, grads, index = bucket.buffer(), bucket.gradients(), bucket.index()
        world = dist.get_world_size()
        plan = plan_bucket(grads, self.rank) if self.iter >= self.warmup else None
        if plan is None or not plan.matrices:
            fut = dist.all_reduce(buffer.div_(world), async_op=True).get_future().then(lambda f: f.value()[0])
        else:
            memory = self.memory.get(index)
            if memory is None:
                memory = first_memory(plan, index, buffer)
            compress(grads, plan, memory, world, dist.all_reduce)
            self.memory[index] = memory
            fut = _done(buffer)
        if bucket.is_last():
            self.iter += 1
        return fut

    def run_split(self, bucket: Any, found: list[int]) -> torch.futures.Future:
        """The first backward after a restart: compress each saved bucket inside ``bucket`` on its own."""
        grads = dict(zip(found, bucket.gradients()))
        parts = [i for i in sorted(self.layout) if set(self.layout[i]) <= set(found)]
        covered = sorted(q for i in parts for q in self.layout[i])
        if covered != sorted(found):
            raise RuntimeError(
                f"rank {dist.get_rank()}: the saved PowerSGD state does not fit this run's DDP buckets (saved "
                f"buckets {sorted(self.layout)} cover parameters {covered[:8]}..., "
                f"this bucket holds {sorted(found)[:8]}...); "
                "resume with the same model and ddp settings, or start compression afresh with checkpoint.resume=none"
            )
        last = max(self.layout)
        for index in parts:
            members = [grads[q] for q in self.layout[index]]
            flat = torch.cat([g.reshape(-1) for g in members])
            views = [v.view_as(g) for v, g in zip(flat.split([g.numel() for g in members]), members)]
            self.run(_SavedBucket(flat, views, index, index == last)).wait()
            for g, v in zip(members, views):
                g.copy_(v)
        return _done(bucket.buffer())

    def checkpoint_state(self) -> dict[str, Any]:
        """Plain tensors and numbers; ``error`` holds every rank's error feedback on rank 0 (a collective)."""
        return {
            "format": FORMAT,
            "iter": int(self.iter),
            "rank": self.rank,
            "bucket_mb": self.bucket_mb,
            "world_size": dist.get_world_size(),
            "numel": sum(p.numel() for p in self.params),
            "layout": {i: torch.tensor(v, dtype=torch.long) for i, v in self.layout.items()},
            "q": {i: m.q.detach().cpu().clone() for i, m in self.memory.items()},
            "error": _gather({i: self.memory[i].error for i in sorted(self.memory)}),
        }

    def load_state(self, saved: dict[str, Any]) -> Optional[str]:
        """Continue from ``checkpoint_state()``; a one-line reason when it cannot and compression restarts."""
        here = {
            "rank": self.rank,
            "bucket_mb": self.bucket_mb,
            "world_size": dist.get_world_size(),
            "numel": sum(p.numel() for p in self.params),
        }
        changed = {k: (saved.get(k), v) for k, v in here.items() if saved.get(k) != v}
        self.iter, self.memory, self.layout = 0, {}, {}
        if not saved:
            why = "is missing (saved with another ddp.compression)"
        elif changed:
            why = "does not fit this run (" + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items()) + ")"
        elif saved.get("format") != FORMAT:
            why = "was written by an earlier version of neural_arch"
        else:
            why = ""
        if why:
            return (
                f"ddp.compression=powersgd: the checkpoint's PowerSGD state {why}; error feedback restarts: "
                f"plain all-reduce for {self.warmup} steps, then PowerSGD afresh"
            )
        device = self.params[0].device
        errors = saved["error"][dist.get_rank()]
        self.iter = int(saved["iter"])
        self.memory = {int(i): Memory(error=errors[i].to(device), q=q.to(device)) for i, q in saved["q"].items()}
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
    """The part of a GradBucket that ``PowerSGDCompressor.run`` reads, for one bucket of the saved layout."""

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
