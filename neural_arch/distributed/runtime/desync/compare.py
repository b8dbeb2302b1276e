"""Compare the ranks' collectives and word the verdict: who differs, each side's call, where they parted.

Use: ``found = find_mismatch({rank: [Entry, ...]})`` (cheap, every beat on rank 0, fingerprints
without call sites); when it is not None, ``explain(found, sites, time.time_ns(), dump_dir)``
with each rank's entries *with* call sites gives the one-line verdict and the ranks it names.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal, Mapping, Optional, Sequence

from neural_arch.distributed.runtime.desync.fingerprints import Entry

MAX_SHIFT = 3
"""A rank that skipped (or added) up to this many collectives in a row is named as such."""

Table = Mapping[int, Entry]
"""One rank's entries of one process group by sequence number."""
Progress = tuple[int, Optional[str]]
"""A rank's count of the script's own collective calls and the one it is in (``call_count.progress()``)."""


@dataclass(frozen=True)
class Mismatch:
    """The earliest collective at which the ranks disagree: ``find_mismatch(records)``."""

    pg: str
    """The process group's name (``"0"``: the default group)."""
    seq: int
    """Torch's sequence number of the collective in that group."""
    at: dict[int, Entry]
    """Each rank's entry at that sequence number."""


@dataclass(frozen=True)
class Shift:
    """How one rank's sequence parted from another's: ``kind`` ``"skipped"``: the odd rank's
    collective #seq is the reference's #seq+count; ``"extra"``: the reverse."""

    kind: Literal["skipped", "extra"]
    seq: int
    count: int


def find_mismatch(records: Mapping[int, Sequence[Entry]]) -> Optional[Mismatch]:
    """The earliest (group, sequence number) at which ranks entered collectives that disagree."""
    table: dict[tuple[int, str], dict[int, Entry]] = defaultdict(dict)
    for rank, entries in records.items():
        for e in entries:
            table[(e.seq, e.pg)][rank] = e
    for seq, pg in sorted(table):
        at = table[(seq, pg)]
        if len({e.signature for e in at.values()}) > 1:
            return Mismatch(pg, seq, dict(at))
    return None


def _groups(at: Mapping[int, Entry]) -> list[list[int]]:
    """Ranks grouped by what they entered; the largest group (lowest rank on a tie) first."""
    by_sig: dict[tuple, list[int]] = defaultdict(list)
    for rank in sorted(at):
        by_sig[at[rank].signature].append(rank)
    return sorted(by_sig.values(), key=lambda ranks: (-len(ranks), ranks[0]))


def _follows(a: Table, s: int, b: Table, k: int) -> bool:
    """Whether ``a``'s collectives from ``s`` on are ``b``'s from ``s + k`` on (up to 3 compared)."""
    compared = 0
    for j in range(3):
        if s + j in a and s + k + j in b:
            if a[s + j].fingerprint != b[s + k + j].fingerprint:
                return False
            compared += 1
        elif j == 0:
            return False
    return compared > 0


def find_shift(odd: Table, ref: Table, upto: int) -> Optional[Shift]:
    """Where ``odd``'s sequence parted from ``ref``'s by a skipped (or extra) run of collectives.
    Call sites that differ without a shift (a rank-dependent branch) are not a desync."""
    for s in sorted(set(odd) & set(ref)):
        if s > upto:
            break
        if odd[s].fingerprint == ref[s].fingerprint:
            continue
        for k in range(1, MAX_SHIFT + 1):
            if _follows(odd, s, ref, k):
                return Shift("skipped", s, k)
            if _follows(ref, s, odd, k):
                return Shift("extra", s, k)
    return None


def _at(entry: Optional[Entry]) -> str:
    if entry is None:
        return "(not in its flight recorder any more)"
    return f"{entry.describe()} at {entry.site or 'an unknown call site'}"


def _in_call(progress: Optional[Progress]) -> str:
    if progress is None or progress[1] is None:
        return ""
    count, current = progress
    if current == "destroy_process_group":
        return " (in destroy_process_group)"
    return f" (in its collective call #{count}, {current})"


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


@dataclass(frozen=True)
class _Side:
    """One group of ranks that entered the same collective, and its first rank's entries."""

    ranks: list[int]
    table: Table


def _say_shift(odd: _Side, ref: _Side, shift: Shift) -> str:
    s, k = shift.seq, shift.count
    many = "" if k == 1 else f" and the {k - 1} collective{'s' if k > 2 else ''} after it"
    if shift.kind == "skipped":
        return (
            f"{_ranks(odd.ranks)} skipped {_at(ref.table.get(s))}{many} ({_ranks(ref.ranks)}'s collective #{s}); "
            f"{_ranks(odd.ranks)}'s #{s} is {_at(odd.table.get(s))}, {_ranks(ref.ranks)}'s #{s + k}"
        )
    return (
        f"{_ranks(odd.ranks)} entered {_at(odd.table.get(s))}{many} that {_ranks(ref.ranks)} did not "
        f"(its collective #{s}); {_ranks(ref.ranks)}'s #{s} is {_at(ref.table.get(s))}, "
        f"{_ranks(odd.ranks)}'s #{s + k}"
    )


def _part(mismatch: Mismatch, odd: _Side, ref: _Side, two_sides: bool) -> tuple[str, list[int]]:
    """One odd group's clause of the verdict, and the ranks it names."""
    shift = find_shift(odd.table, ref.table, mismatch.seq) if odd.table and ref.table else None
    if shift is not None and shift.kind == "extra" and two_sides and len(odd.ranks) == len(ref.ranks):
        # Two ranks (or two equal halves): "rank 1 called an extra one" and "rank 0 skipped one"
        # are the same fact; say it as the skip, naming the rank that skipped.
        odd, ref, shift = ref, odd, Shift("skipped", shift.seq, shift.count)
    if shift is not None:
        return _say_shift(odd, ref, shift), odd.ranks
    odd_entry = odd.table.get(mismatch.seq) or mismatch.at[odd.ranks[0]]
    ref_entry = ref.table.get(mismatch.seq) or mismatch.at[ref.ranks[0]]
    return (
        f"at collective #{mismatch.seq} {_ranks(odd.ranks)} entered {_at(odd_entry)} "
        f"while {_ranks(ref.ranks)} entered {_at(ref_entry)}"
    ), odd.ranks


def explain(
    mismatch: Mismatch,
    sites: Mapping[int, Sequence[Entry]],
    now_ns: int,
    dump_dir: str,
    calls: Optional[Mapping[int, Progress]] = None,
) -> tuple[str, list[int]]:
    """The one-line verdict (who differs, each side's call, where the sequences parted) and the
    ranks it names; ``calls``: each rank's ``call_count.progress()``, to say where a rank is in the
    script's terms."""
    tables = {r: {e.seq: e for e in entries if e.pg == mismatch.pg} for r, entries in sites.items()}
    groups = _groups(mismatch.at)
    ref = _Side(groups[0], tables.get(groups[0][0], {}))
    parts, named = [], []
    for ranks in groups[1:]:
        part, odd_ranks = _part(mismatch, _Side(ranks, tables.get(ranks[0], {})), ref, len(groups) == 2)
        parts.append(part)
        named.extend(odd_ranks)
    any_entry = next(iter(mismatch.at.values()))
    group = "the default process group" if mismatch.pg == "0" else f"process group {mismatch.pg} ({any_entry.desc})"
    newest = {r: max((e.seq for e in entries if e.pg == mismatch.pg), default=0) for r, entries in sites.items()}
    at_now = ", ".join(f"rank {r} at #{n}{_in_call((calls or {}).get(r))}" for r, n in sorted(newest.items()))
    diverged = max(e.created_ns for e in mismatch.at.values())
    timeout_s = max(e.timeout_ms for e in mismatch.at.values()) / 1000
    return (
        f"collective desync in {group}: {'; '.join(parts)}. Latest collectives: {at_now}. Named "
        f"{max(0.0, (now_ns - diverged) / 1e9):.1f} s after the ranks' collectives #{mismatch.seq} diverged, "
        f"of the {timeout_s:g} s the process group would wait. Flight-recorder dumps: {dump_dir} (read them with: "
        f"python -m torch.distributed.flight_recorder.fr_trace {dump_dir})",
        sorted(named),
    )
