"""Read torch's flight recorder: the collectives this process entered, as torch noted them.

Use: ``enable_flight_recorder()`` before the process group is made, ``since = last_record_ids()``
right before it, then ``entries(dumps(), since)`` for the current groups' raw entries (dicts in
torch's dump format), oldest first; ``dumps(stacks=True)`` adds each entry's Python stack.

Torch notes every collective the process enters -- the script's own and those DDP's reducer and
FSDP issue -- with its process group, sequence number, op, shapes, dtypes and stack. The variable
that sizes its ring buffer (``TORCH_FR_BUFFER_SIZE``) is torch's, read by torch once; ``0`` turns
the recorder, and with it the desync check, off.
"""

from __future__ import annotations

import os
import pickle
import sys
import types
from contextlib import contextmanager
from typing import Iterator, Mapping

import torch

FR_BUFFER = 256
"""Collectives torch's flight recorder keeps per process when the job did not choose (its ring buffer)."""

# Torch's recorders: gloo's (the CPU one) and, in CUDA builds, NCCL's. Each numbers its own entries.
RECORDERS = ("_dump_fr_trace", "_dump_nccl_trace")

Since = Mapping[str, int]
"""Per recorder, the newest entry of earlier process groups (``last_record_ids()``)."""


def enable_flight_recorder() -> None:
    """Turn on torch's flight recorder for this process unless the job chose its size itself.

    Call before the process group (and any flight-recorder dump) is made: torch reads its own
    variable ``TORCH_FR_BUFFER_SIZE`` (``TORCH_NCCL_TRACE_BUFFER_SIZE`` is its older name) once,
    when the recorder is first used. ``0`` in either turns the desync check off. The variable is
    torch's, not ours; it is also inherited by the script's child processes."""
    if "TORCH_FR_BUFFER_SIZE" not in os.environ and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ:
        os.environ["TORCH_FR_BUFFER_SIZE"] = str(FR_BUFFER)


def recorder_enabled() -> bool:
    """Whether torch's flight recorder keeps entries in this process (what torch reads)."""
    value = os.environ.get("TORCH_FR_BUFFER_SIZE", os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0"))
    try:
        return int(value) > 0
    except ValueError:
        return False


def _c10d() -> types.ModuleType:
    return torch._C._distributed_c10d


def dumps(stacks: bool = False) -> dict[str, dict]:
    """Each recorder's dump, as torch pickles it for its analyzer; with Python stacks only on
    request (symbolizing them is the expensive part)."""
    out = {}
    for name in RECORDERS:
        dump = getattr(_c10d(), name, None)
        if dump is None:
            continue
        try:
            if stacks:
                with compiler_not_imported():
                    out[name] = pickle.loads(dump())
            else:
                out[name] = pickle.loads(dump(includeStackTraces=False))
        except Exception:  # noqa: BLE001 - a recorder this build cannot dump: compare without it
            continue
    return out


def last_record_ids() -> dict[str, int]:
    """Each recorder's newest entry id: entries up to it belong to earlier process groups (the
    recorder keeps them, and a new group numbers its collectives from 1 again)."""
    return {
        name: max((int(e["record_id"]) for e in data.get("entries", [])), default=-1) for name, data in dumps().items()
    }


def entries(taken: Mapping[str, Mapping], since: Since) -> list[Mapping]:
    """The raw entries of the current process groups in ``taken`` (a ``dumps()``), oldest first."""
    rows = [
        e
        for name, data in taken.items()
        for e in data.get("entries", [])
        if int(e.get("record_id", -1)) > since.get(name, -1)
    ]
    return sorted(rows, key=lambda e: int(e.get("time_created_ns") or 0))


@contextmanager
def compiler_not_imported() -> Iterator[None]:
    """Symbolize stacks without importing torch's compiler: ``with compiler_not_imported(): dump()``.

    Why: torch's stack symbolizer asks ``hasattr(torch, "_inductor")`` (to add frames of compiled
    code), and torch answers that lookup by importing torch._inductor, dynamo and sympy: seconds and
    hundreds of MB, in a rank that had no use for them. Where the compiler is not loaded, a stand-in
    without ``codecache`` answers instead, for the length of the dump only. The dump happens once,
    when a desync was found and the rank is about to fail; were torch to change that lookup, the
    import would simply happen."""
    if "torch._inductor" in sys.modules or "_inductor" in vars(torch):
        yield
        return
    stand_in = types.ModuleType("torch._inductor")
    torch._inductor = stand_in  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if vars(torch).get("_inductor") is stand_in:
            delattr(torch, "_inductor")
