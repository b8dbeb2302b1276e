"""Judging and summarising soak rounds: outcome, recovery time, the per-kind table.

Used by benchmarks/soak/soak.py (not run by itself).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any, Optional

import torch

from neural_arch.distributed.checkpoint import load_checkpoint, with_whole_model

SUMMARY_MARK = "neural_arch launcher: job failed after"
"""The first line of the launcher's failure summary (launcher/failures.py)."""


def final_params(run_dir: Path) -> Optional[dict[str, torch.Tensor]]:
    """The model of the newest good checkpoint, or None if none loads."""
    found = load_checkpoint(run_dir / "checkpoints")
    return None if found is None else with_whole_model(found[0].path, found[1])["model"]


def _differs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> Optional[str]:
    if a.keys() != b.keys():
        return f"parameter names differ: {sorted(a)} vs {sorted(b)}"
    for name in a:
        if not torch.equal(a[name], b[name]):
            return f"{name} differs by up to {float((a[name] - b[name]).abs().max()):.3e}"
    return None


def outcome(rc: Optional[int], round_dir: Path, reference: dict[str, torch.Tensor]) -> dict[str, Any]:
    """``recovered`` (exit 0, weights bitwise equal to ``reference``), ``exhausted`` (the
    launcher's summary and a loadable checkpoint), or a failure: ``MISMATCH``, ``HUNG``, ``FAILED``."""
    run_dir = round_dir / "run"
    try:
        params, why = final_params(run_dir), "no checkpoint loads"
    except Exception as exc:  # noqa: BLE001 - an unloadable checkpoint is a finding, not a crash of the soak
        params, why = None, f"loading the checkpoint failed: {type(exc).__name__}: {exc}"
    if rc is None:
        return {"outcome": "HUNG", "ok": False, "detail": f"still running after the round's time limit; {why}"}
    if rc == 0:
        diff = _differs(params, reference) if params is not None else why
        return {"outcome": "recovered" if diff is None else "MISMATCH", "ok": diff is None, "detail": diff or ""}
    text = (round_dir / "out.txt").read_text(errors="replace")
    summary = text[text.find(SUMMARY_MARK) :] if SUMMARY_MARK in text else ""
    if summary and params is not None:
        return {"outcome": "exhausted", "ok": True, "detail": summary.splitlines()[1:3]}
    return {
        "outcome": "FAILED",
        "ok": False,
        "detail": f"exit {rc}; {'summary' if summary else 'no summary'}; "
        f"{why if params is None else 'checkpoint loads'}",
    }


def recovery(rows: list[dict[str, Any]], t_fault: Optional[float], run_dir: Path) -> dict[str, Any]:
    """Fault -> first step completed by a process that had trained no step before the fault."""
    faults = [r["t"] for r in rows if "fault" in r]
    t_fault = t_fault if t_fault is not None else (faults[0] if faults else None)
    log = run_dir / "logs" / "rank_0.log"
    resumed = (
        [int(k) for k in re.findall(r"resumed from step (\d+)", log.read_text(errors="replace"))]
        if log.exists()
        else []
    )
    found: dict[str, Any] = {
        "recovery_s": None,
        "fault_after_step": None,
        "resumed_from": resumed,
        "attempts": 1 + max((r.get("attempt", 0) for r in rows), default=0),
    }
    if t_fault is None:
        return found
    before = [r for r in rows if "fault" not in r and r["t"] <= t_fault]
    old = {r["pid"] for r in before}
    after = [r["t"] for r in rows if "fault" not in r and r["t"] > t_fault and r["pid"] not in old]
    found["fault_after_step"] = max((r["step"] for r in before), default=0)
    found["recovery_s"] = round(min(after) - t_fault, 2) if after else None
    return found


def print_table(records: list[dict[str, Any]]) -> None:
    """One row per fault kind and a total: rounds, outcomes, median recovery, orphans, leftovers."""
    head = (
        "fault",
        "rounds",
        "recovered bitwise",
        "exhausted + summary",
        "failed",
        "median recovery",
        "orphans",
        "leftover temp dirs",
    )
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    kinds = sorted({r["kind"] for r in records}, key=[r["kind"] for r in records].index)
    for kind in [*kinds, "all"]:
        rows = [r for r in records if kind in ("all", r["kind"])]
        times = [r["recovery_s"] for r in rows if r["recovery_s"] is not None and r["outcome"] == "recovered"]
        cells = (
            kind,
            len(rows),
            sum(r["outcome"] == "recovered" for r in rows),
            sum(r["outcome"] == "exhausted" for r in rows),
            sum(not r["ok"] for r in rows),
            f"{statistics.median(times):.1f} s" if times else "-",
            sum(r["orphans"] for r in rows),
            sum(len(r["leftovers"]) for r in rows),
        )
        print("| " + " | ".join(map(str, cells)) + " |")
    for r in records:
        if not r["ok"] or r["orphans"] or r["leftovers"]:
            print(
                f"round {r['round'] + 1} ({r['kind']}): {r['outcome']}: {r['detail']}; orphans {r['orphan_cmds']}; "
                f"leftovers {r['leftovers']}"
            )
