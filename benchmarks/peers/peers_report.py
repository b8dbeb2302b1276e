"""peers.py's table and chart (not run on its own): ``report(workload, records, base, batch)``, ``chart(...)``.

``records[peer]`` is one ``peers_run.Record`` per round (None: that run failed, left out).
Step time: rank 0's median step interval after the first 2 (DDP settles its buckets after
step 1); ratios are the median over rounds of the per-round ratio against the baseline's
run of the same round (rounds where either failed are left out).
"""

from __future__ import annotations

import statistics
from typing import Optional

import matplotlib

matplotlib.use("Agg")  # files only, no display on this machine
import matplotlib.pyplot as plt

from benchmarks.peers.peers_run import Record

SKIP = 2
"""Step intervals left out at the start of each run."""


def step_s(rec: Record) -> float:
    gaps = [b - a for a, b in zip(rec.stamps, rec.stamps[1:])][SKIP:]
    return statistics.median(gaps)


def first_step_s(rec: Record) -> float:
    return rec.stamps[0] - rec.started


def _per_round(runs: list[Optional[Record]], base: list[Optional[Record]], value) -> float:
    pairs = [value(a) / value(b) for a, b in zip(runs, base) if a is not None and b is not None]
    return statistics.median(pairs) if pairs else float("nan")


def _ok(runs: list[Optional[Record]]) -> list[Record]:
    return [r for r in runs if r is not None]


def report(workload: str, steps: int, records: dict[str, list[Optional[Record]]], base: str, batch: int) -> None:
    """Print one workload's table: step, samples/s, ratios, first step, RSS per rank, loss and its difference."""
    ref = records[base]
    ref_loss = _ok(ref)[0].loss
    print(f"\n{workload}: {steps} steps, global batch {batch}, {len(ref)} rounds (medians over rounds)")
    print(
        f"{'framework':<24} {'step ms':>8} {'samples/s':>9} {'x raw':>6} {'first step s':>12} {'x raw':>6} "
        f"{'peak RSS MiB r0/r1':>18} {'final loss':>12} {'- raw DDP':>10}"
    )
    for peer, all_runs in records.items():
        runs = _ok(all_runs)
        step = statistics.median(step_s(r) for r in runs)
        first = statistics.median(first_step_s(r) for r in runs)
        rss = [statistics.median(r.rss_mib[k] for r in runs) for k in range(2)]
        losses = {r.loss for r in runs}
        note = "" if len(losses) == 1 else f" (varies over rounds by {max(losses) - min(losses):.2e})"
        note += "" if len(runs) == len(all_runs) else f" ({len(all_runs) - len(runs)} failed run(s) left out)"
        print(
            f"{peer:<24} {step * 1e3:8.1f} {batch / step:9.1f} {_per_round(all_runs, ref, step_s):6.3f} {first:12.2f} "
            f"{_per_round(all_runs, ref, first_step_s):6.2f} {rss[0]:8.0f} / {rss[1]:<7.0f} {runs[0].loss:12.8f} "
            f"{runs[0].loss - ref_loss:+10.2e}{note}"
        )
    print(
        "per-round step ms:",
        {p: [None if r is None else round(step_s(r) * 1e3, 1) for r in runs] for p, runs in records.items()},
    )
    startup(records)


def startup(records: dict[str, list[Optional[Record]]]) -> None:
    """Where the time to the first step goes (medians over rounds, seconds from the command's start)."""
    print(
        "start-up, seconds from the command (rank 0): script running / process group joined / "
        "trainer set up / first step done"
    )
    for peer, all_runs in records.items():
        runs = _ok(all_runs)
        marks = []
        for key in ("launched", "joined", "set_up"):
            values = [r.phases[key] - r.started for r in runs if key in r.phases]
            marks.append(f"{statistics.median(values):6.2f}" if values else "     -")
        print(f"  {peer:<24} {' / '.join(marks)} / {statistics.median(first_step_s(r) for r in runs):6.2f}")


def chart(records: dict[str, dict[str, list[Optional[Record]]]], base: str, path: str) -> None:
    """Per workload: step time and time to first step relative to the baseline (per-round medians)."""
    workloads = list(records)
    fig, axes = plt.subplots(2, len(workloads), figsize=(6.5 * len(workloads), 8), squeeze=False)
    for col, workload in enumerate(workloads):
        peers = list(records[workload])
        ref = records[workload][base]
        for row, (value, label) in enumerate(((step_s, "median step time"), (first_step_s, "command to first step"))):
            ax = axes[row][col]
            ratios = [_per_round(records[workload][p], ref, value) for p in peers]
            absolute = [statistics.median(value(r) for r in _ok(records[workload][p])) for p in peers]
            bars = ax.bar(range(len(peers)), ratios, color=[f"C{i}" for i in range(len(peers))])
            for bar, ratio, seconds in zip(bars, ratios, absolute):
                text = f"{ratio:.2f}x\n{seconds * 1e3:.0f} ms" if row == 0 else f"{ratio:.2f}x\n{seconds:.1f} s"
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), text, ha="center", va="bottom", fontsize=8)
            ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
            ax.set_xticks(range(len(peers)), peers, rotation=25, ha="right", fontsize=8)
            ax.set_ylabel(f"{label} / raw DDP's")
            ax.set_ylim(0, max(ratios) * 1.3)
            ax.set_title(f"{workload}: {label}")
    fig.suptitle("Same model, data, batch and optimizer on 2 gloo ranks x 1 thread (benchmarks/peers/peers.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
