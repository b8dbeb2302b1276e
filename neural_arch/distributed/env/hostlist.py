"""SLURM hostlist expressions -> host names: ``expand_hostlist("node[01-03,7],gpu1")``.

Try it: ``python -c "from neural_arch.distributed.env import expand_hostlist as e; print(e('n[1-2]-ib[0-1]'))"``

The syntax is SLURM's (``scontrol show hostnames`` is the reference): a comma-separated
list whose commas inside brackets do not split; each item may hold several bracket groups
(the expansion is their cartesian product, leftmost varying slowest); a group holds
numbers and ``lo-hi`` ranges, and a zero-padded bound keeps its width (``[008-010]``).
Literal suffixes after a group (``n[1-2]-ib``) are accepted, as newer SLURM does. With
three or more groups in one name SLURM 22.05 lists the same hosts in a different order;
the first host (the one that matters for the rendezvous) is the same.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top_level(text: str) -> list[str]:
    items, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"hostlist {text!r}: nested '[' is not valid SLURM syntax.")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist {text!r}: ']' without a matching '['.")
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise ValueError(f"hostlist {text!r}: '[' without a matching ']'.")
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def _expand_group(group: str, whole: str) -> list[str]:
    values: list[str] = []
    for part in group.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise ValueError(f"hostlist {whole!r}: bracket item {part!r} is not a number or 'lo-hi' range.")
        lo_text, hi_text = match.group(1), match.group(2)
        if hi_text is None:
            values.append(lo_text)
            continue
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise ValueError(f"hostlist {whole!r}: range {part!r} runs backwards.")
        width = len(lo_text) if lo_text.startswith("0") and len(lo_text) > 1 else 0
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


def _expand_item(item: str) -> list[str]:
    hosts = [""]
    for literal, group in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
        hosts = [h + literal for h in hosts]
        if group:
            hosts = [h + v for h in hosts for v in _expand_group(group, item)]
    return hosts


def expand_hostlist(text: str) -> list[str]:
    """All host names of a SLURM hostlist expression, in SLURM's order (duplicates kept)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"hostlist {text!r} is empty; expected e.g. 'node[01-04]'.")
    if "[]" in text.replace(" ", ""):
        raise ValueError(f"hostlist {text!r}: empty brackets '[]'.")
    hosts: list[str] = []
    for item in _split_top_level(text.strip()):
        hosts.extend(_expand_item(item))
    return hosts
