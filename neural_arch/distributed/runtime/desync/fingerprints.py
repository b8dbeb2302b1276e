"""Fingerprints of the collectives a rank entered: what must agree across ranks, and where it was called.

Use: ``recent(since)`` for this process's newest entries without call sites (cheap: each beat),
``with_sites(recorder.dumps(stacks=True), since)`` for all of them with call sites (once, when a
desync is suspected); ``encode``/``decode`` carry them through the job's store as JSON.
``entry.signature`` is what must be equal on every rank at one sequence number.
"""

from __future__ import annotations

import json
import os
import sysconfig
from typing import Mapping, NamedTuple, Optional, Sequence

import torch

from neural_arch.distributed.runtime.desync import recorder

WINDOW = 64
"""Newest collectives each rank publishes every beat for rank 0 to compare."""

# Collectives whose inputs must have one shape and dtype on every rank; others are compared by op.
SHAPED = {
    "all_reduce",
    "allreduce",
    "allreduce_coalesced",
    "all_reduce_coalesced",
    "broadcast",
    "reduce",
    "all_gather",
    "allgather",
    "_allgather_base",
    "all_gather_into_tensor",
    "allgather_into_tensor_coalesced",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced",
    "gather",
    "barrier",
}
_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
}


class Entry(NamedTuple):
    """One collective a rank entered, as the flight recorder saw it: ``Entry.decode(row).describe()``.

    A tuple rather than a dataclass because rank 0 decodes thousands of them every beat."""

    pg: str
    """The process group's name (``"0"``: the default group)."""
    desc: str
    """The group's description (``default_pg``)."""
    seq: int
    """Torch's sequence number of the collective in its group (internal collectives included)."""
    op: str
    sizes: tuple
    dtypes: tuple
    created_ns: int
    timeout_ms: int = 0
    site: str = ""
    """``file:line`` of the innermost frame outside torch, ``neural_arch.distributed`` and the standard
    library: the script's call (or its ``loss.backward()`` for DDP's reducer); empty when unknown."""

    @property
    def signature(self) -> tuple:
        """What must agree across ranks."""
        return (self.op, self.sizes, self.dtypes) if self.op in SHAPED else (self.op,)

    @property
    def fingerprint(self) -> tuple:
        """The signature and the call site: what a shifted sequence must repeat to count as a skip."""
        return self.signature + (self.site,)

    def encode(self) -> list:
        return list(self)

    @classmethod
    def decode(cls, row: list) -> Entry:
        pg, desc, seq, op, sizes, dtypes, created, timeout, site = row
        return cls(pg, desc, seq, op, _tuples(sizes), tuple(dtypes), created, timeout, site)

    def describe(self) -> str:
        """``all_reduce((4,) float32)``."""
        shapes = ", ".join(f"{_shape(s)} {_DTYPES.get(d, d)}" for s, d in zip(self.sizes, self.dtypes))
        return f"{self.op}({shapes})"


def _tuples(sizes: Sequence) -> tuple:
    return tuple(map(tuple, sizes))


def _shape(size: Sequence[int]) -> str:
    return f"({size[0]},)" if len(size) == 1 else f"({', '.join(map(str, size))})"


def from_raw(raw: Mapping, site: str = "") -> Optional[Entry]:
    """The entry of one raw flight-recorder row; None for point-to-point and unnumbered rows."""
    if raw.get("is_p2p") or raw.get("collective_seq_id") is None:
        return None
    name, desc = (list(raw.get("process_group") or ["?", ""]) + [""])[:2]
    return Entry(
        pg=str(name),
        desc=str(desc),
        seq=int(raw["collective_seq_id"]),
        op=str(raw.get("profiling_name", "?")).split(":", 1)[-1],
        sizes=_tuples(raw.get("input_sizes") or []),
        dtypes=tuple(raw.get("input_dtypes") or []),
        created_ns=int(raw.get("time_created_ns") or 0),
        timeout_ms=int(raw.get("timeout_ms") or 0),
        site=site,
    )


def _library_dirs() -> tuple[str, ...]:
    here = os.path.abspath(__file__)
    distributed = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # neural_arch/distributed
    paths = sysconfig.get_paths()
    dirs = {os.path.dirname(os.path.abspath(torch.__file__)), distributed, paths["stdlib"], paths["platstdlib"]}
    return tuple(os.path.join(d, "") for d in dirs)


_LIBRARY = _library_dirs()


def call_site(frames: Sequence[Mapping]) -> str:
    """``file:line`` of the innermost frame that is the script's (not torch's, not
    ``neural_arch.distributed``'s, not the standard library's); relative to the working directory
    when inside it."""
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if filename.startswith("<frozen") or os.path.abspath(filename).startswith(_LIBRARY):
            continue
        try:
            shown = os.path.relpath(filename)
            shown = filename if shown.startswith("..") else shown
        except ValueError:  # another drive (Windows)
            shown = filename
        return f"{shown}:{frame.get('line', '?')}"
    return ""


def recent(since: recorder.Since, limit: int = WINDOW) -> list[Entry]:
    """This process's newest collectives of the current process groups, without call sites (cheap)."""
    found: list[Entry] = []
    for row in reversed(recorder.entries(recorder.dumps(), since)):
        entry = from_raw(row)
        if entry is not None:
            found.append(entry)
            if len(found) == limit:
                break
    return found[::-1]


def with_sites(taken: Mapping[str, Mapping], since: recorder.Since) -> list[Entry]:
    """The entries of dumps taken with stacks, with call sites."""
    rows = recorder.entries(taken, since)
    return [e for e in (from_raw(r, call_site(r.get("frames") or [])) for r in rows) if e is not None]


def encode(entries: Sequence[Entry]) -> str:
    """Entries as compact JSON, for the store."""
    return json.dumps([e.encode() for e in entries], separators=(",", ":"))


def decode(blob: bytes) -> list[Entry]:
    """The entries ``encode`` wrote."""
    return [Entry.decode(row) for row in json.loads(blob.decode())]
