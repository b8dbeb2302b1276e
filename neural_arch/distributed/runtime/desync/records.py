"""What the ranks' checkers exchange through the job's store, and under which keys.

Use: ``store.set(fingerprints_key(rank), fingerprints.encode(entries))`` each beat;
``Suspect``, ``Sites`` and ``Verdict`` are written once a desync is suspected, found and named
(``.save(store)`` / ``.load(store)``). The store is the heartbeat's channel, never the process
group, which is what may be stuck.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import ClassVar, Optional, TypeVar

import torch.distributed as dist

from neural_arch.distributed.runtime.desync.fingerprints import Entry

_PREFIX = "neural_arch/desync"
SUSPECT = f"{_PREFIX}/suspect"
VERDICT = f"{_PREFIX}/verdict"


def fingerprints_key(rank: int) -> str:
    """Where ``rank`` publishes its newest fingerprints, each beat it entered a collective."""
    return f"{_PREFIX}/fingerprints/{rank}"


def sites_key(rank: int) -> str:
    """Where ``rank`` publishes its entries with call sites, once a desync is suspected."""
    return f"{_PREFIX}/sites/{rank}"


def _json(record: object) -> str:
    return json.dumps(asdict(record), separators=(",", ":"))  # type: ignore[call-overload]


_Record = TypeVar("_Record", bound="_Once")


class _Once:
    """A record the job stores once (the first one stands): a suspicion, then a verdict."""

    KEY: ClassVar[str]

    def save(self, store: dist.Store) -> None:
        """Store it, unless one is stored already."""
        store.compare_set(self.KEY, "", _json(self))

    @classmethod
    def load(cls: type[_Record], store: dist.Store) -> Optional[_Record]:
        """The stored record, if any (one store round trip when there is none)."""
        if not store.check([cls.KEY]):
            return None
        return cls(**json.loads(store.get(cls.KEY).decode()))


@dataclass(frozen=True)
class Suspect(_Once):
    """Rank 0 found ranks disagreeing at collective #seq of group pg; every rank dumps to ``dir``."""

    KEY: ClassVar[str] = SUSPECT
    pg: str
    seq: int
    dir: str


@dataclass(frozen=True)
class Sites:
    """One rank's entries with call sites, and where it is in the script's own collective calls."""

    entries: list[list]
    """``Entry.encode()`` rows."""
    calls: int
    """How many collective calls of the script the rank entered (``call_count.progress()``)."""
    current: Optional[str]
    """The call it is in, if any."""

    def save(self, store: dist.Store, rank: int) -> None:
        store.set(sites_key(rank), _json(self))

    @classmethod
    def load(cls, store: dist.Store, rank: int) -> Sites:
        return cls(**json.loads(store.get(sites_key(rank)).decode()))

    def decoded(self) -> list[Entry]:
        return [Entry.decode(row) for row in self.entries]


@dataclass(frozen=True)
class Verdict(_Once):
    """Rank 0's one-line verdict and the ranks it names; every rank acts on it."""

    KEY: ClassVar[str] = VERDICT
    line: str
    named: list[int]
