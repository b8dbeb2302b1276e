"""World-size-invariant, resumable data sharding: ``DistributedSampler``.

Try it: ``python -c "from neural_arch.distributed import DistributedSampler as S;
print(list(S(dataset_size=10, num_replicas=3, rank=1, shuffle=False)))"`` -> [1, 4, 7].

The global sample order of an epoch depends only on ``(seed, epoch)`` (it is the same
permutation ``torch.utils.data.DistributedSampler`` draws). Rank r takes the strided
share ``order[r::W]`` — with ``shuffle=False`` exactly the C++ loop
``for (i = rank; i < n; i += size)``. Nothing is padded with duplicated samples, so ranks
may get different counts at the end of an epoch.

With ``batch_size=B`` (a *global* batch size) the sampler is a batch sampler: global batch
k is ``order[kB:(k+1)B]`` at any world size, rank r yields its strided share of it (an
``IndexBatch``, possibly empty), and every rank yields the same number of batches so DDP
never waits on a rank that ran out. ``IndexBatch.global_size`` is the size of the whole
global batch, which is what exact loss weighting needs (see ``weighting.py``).

``state_dict()`` stores the global position (samples consumed in the epoch), which
``load_state_dict`` restores at any world size: no sample is skipped or repeated. A restored
epoch that was already complete yields nothing (it is not replayed); an epoch this sampler
handed out itself starts again when iterated anew. The position counts what the sampler
has *handed out*: take ``state_dict()`` where nothing is prefetched (a ``DataLoader`` with
``num_workers=0``), or compute the position from the steps actually trained.
"""

from __future__ import annotations

import operator
from typing import Any, Iterator, Optional, Sized, Union

import torch
from torch.utils.data import Sampler

from neural_arch.distributed.runtime.guard import require_process_group
from neural_arch.distributed.runtime.process_group import get_rank, get_world_size


class IndexBatch(list):
    """This rank's indices of one global batch, plus the global batch's total size."""

    def __init__(self, indices: list[int], global_size: int) -> None:
        super().__init__(indices)
        self.global_size = global_size
        """Number of samples in the whole global batch, summed over all ranks."""


def _check_int(name: str, value: Any, minimum: int) -> int:
    # operator.index accepts numpy and 0-d torch integers (e.g. `for epoch in np.arange(n)`)
    # but not floats, which would otherwise be truncated silently.
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if isinstance(value, bool) or number is None or number < minimum:
        raise ValueError(f"DistributedSampler: {name}={value!r} must be an integer >= {minimum}.")
    return number


class DistributedSampler(Sampler):
    """Shard ``dataset`` (or ``range(dataset_size)``) across ranks; see the module docstring."""

    def __init__(
        self,
        dataset: Optional[Sized] = None,
        *,
        dataset_size: Optional[int] = None,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        batch_size: Optional[int] = None,
    ) -> None:
        if (dataset is None) == (dataset_size is None):
            raise ValueError(
                "DistributedSampler needs exactly one of `dataset` or `dataset_size=`; "
                f"got dataset={'set' if dataset is not None else None}, dataset_size={dataset_size!r}."
            )
        if num_replicas is None or rank is None:  # taken from the process group: there must be one
            require_process_group("DistributedSampler (without num_replicas= and rank=)")
        size = len(dataset) if dataset is not None else dataset_size
        self.dataset_size = _check_int("dataset_size", size, 0)
        self.num_replicas = _check_int("num_replicas", get_world_size() if num_replicas is None else num_replicas, 1)
        self.rank = _check_int("rank", get_rank() if rank is None else rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(
                f"DistributedSampler: rank={self.rank} must be smaller than num_replicas={self.num_replicas}."
            )
        self.batch_size = None if batch_size is None else _check_int("batch_size", batch_size, 1)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._position = 0  # global samples of this epoch already handed out
        # Whether a fully handed-out epoch starts again when iterated anew; False right after
        # load_state_dict, so a checkpoint taken at the end of an epoch does not replay it.
        self._restart_when_done = True

    # --- the epoch's global order -------------------------------------------------
    @property
    def samples_per_epoch(self) -> int:
        """Samples used per epoch over all ranks (after ``drop_last``)."""
        unit = self.batch_size if self.batch_size is not None else self.num_replicas
        if self.drop_last:
            return self.dataset_size - self.dataset_size % unit
        return self.dataset_size

    def global_order(self) -> torch.Tensor:
        """The epoch's sample order over all ranks (int64), a function of (seed, epoch) only."""
        if not self.shuffle:
            return torch.arange(self.dataset_size)
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        return torch.randperm(self.dataset_size, generator=generator)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its order). Re-selecting the current epoch keeps a restored position."""
        epoch = _check_int("epoch", epoch, 0)
        if epoch != self.epoch:
            self.epoch = epoch
            self._position = 0
            self._restart_when_done = True

    def _start(self) -> int:
        end = self.samples_per_epoch
        if self._position < end:
            return self._position
        return 0 if self._restart_when_done else end

    def _begin(self) -> int:
        start = self._start()
        self._restart_when_done = True  # the epoch after this one is a fresh pass
        return start

    # --- iteration ----------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        if self.batch_size is None:
            return self._iter_samples()
        return self._iter_batches()

    def _iter_samples(self) -> Iterator[int]:
        start, end, size = self._begin(), self.samples_per_epoch, self.num_replicas
        order = self.global_order().tolist()  # why: indexing a tensor per sample costs ~2 us
        for i in range(start + self.rank, end, size):
            self._position = min(i - self.rank + size, end)
            yield order[i]
        self._position = end

    def _iter_batches(self) -> Iterator[IndexBatch]:
        assert self.batch_size is not None
        start, end = self._begin(), self.samples_per_epoch
        order = self.global_order()
        for first in range(start, end, self.batch_size):
            chunk = order[first : min(first + self.batch_size, end)]
            self._position = first + len(chunk)
            yield IndexBatch(chunk[self.rank :: self.num_replicas].tolist(), len(chunk))
        self._position = end

    def __len__(self) -> int:
        """Items the next iteration yields on this rank (samples, or batches with batch_size)."""
        remaining = self.samples_per_epoch - self._start()
        if self.batch_size is not None:
            return -(-remaining // self.batch_size)
        return max(0, -(-(remaining - self.rank) // self.num_replicas))

    def global_batch_sizes(self) -> list[int]:
        """The global size of each batch the next iteration yields (``batch_size`` set): known on
        every rank without a collective (a DataLoader drops ``IndexBatch.global_size``: ``with_global_size``)."""
        if self.batch_size is None:
            raise ValueError("DistributedSampler.global_batch_sizes needs batch_size= (the global batch size).")
        end = self.samples_per_epoch
        return [min(self.batch_size, end - first) for first in range(self._start(), end, self.batch_size)]

    @property
    def num_samples(self) -> int:
        """Alias of ``len(self)`` for code written against torch's sampler."""
        return len(self)

    # --- resumable state ----------------------------------------------------------
    def state_dict(self) -> dict[str, Union[int, bool, None]]:
        """World-size-independent position: restore it on any number of ranks."""
        return {
            "epoch": self.epoch,
            "position": self._position,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "dataset_size": self.dataset_size,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position; the data and ordering settings must match."""
        for key in ("dataset_size", "seed", "shuffle", "drop_last"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"DistributedSampler.load_state_dict: saved {key}={state[key]!r} but this sampler "
                    f"has {key}={getattr(self, key)!r}; construct it with the same {key} to resume."
                )
        position = _check_int("position", state["position"], 0)
        if position > self.dataset_size:
            raise ValueError(
                f"DistributedSampler.load_state_dict: position {position} is past the dataset's "
                f"{self.dataset_size} samples; the state belongs to another dataset."
            )
        self.epoch = _check_int("epoch", state["epoch"], 0)
        self._position = position
        self._restart_when_done = False
