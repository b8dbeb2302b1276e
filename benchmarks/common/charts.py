"""Charts of memory.py's and pipeline.py's results (not run on its own): ``memory_chart(rows, path)``,
``pipeline_chart(rows, path)``."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display on this machine
import matplotlib.pyplot as plt

MB = 2**20


def _slant(ax: Any) -> None:
    ax.tick_params(axis="x", rotation=45)
    for tick in ax.get_xticklabels():
        tick.set_horizontalalignment("right")


def memory_chart(rows: dict[str, dict[str, float]], path: str) -> None:
    """Left: per-rank parameters, gradients and Adam state stacked; right: bytes saved for backward."""
    names = list(rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    bottom = [0.0] * len(names)
    for key, label in (("param", "parameters"), ("grad", "gradients"), ("optim", "Adam state")):
        values = [rows[n][key] / MB for n in names]
        left.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    left.set_title("parameters + gradients + optimizer state")
    left.legend()
    right.bar(names, [rows[n]["saved"] / MB for n in names], color="tab:red")
    right.set_title("saved for backward in one step (peak)")
    for ax in (left, right):
        ax.set_ylabel("MiB on the largest rank")
        _slant(ax)
    fig.suptitle("GPT d128 x 8 blocks, ctx 128, global batch 16, float32 (benchmarks/memory/memory.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def pipeline_chart(rows: list[dict[str, Any]], path: str) -> None:
    """Idle fraction against micro-batches, one panel per pipeline size: measured (mean over
    ranks) per schedule, and the theory for 1 and for 2 stages per rank (grey)."""
    sizes = sorted({r["pp"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5), squeeze=False)
    for ax, pp in zip(axes[0], sizes, strict=True):
        mine = sorted((r for r in rows if r["pp"] == pp), key=lambda r: r["m"])
        for i, schedule in enumerate(dict.fromkeys(r["schedule"] for r in mine)):
            points = [r for r in mine if r["schedule"] == schedule]
            ax.plot([r["m"] for r in points], [r["idle"] for r in points], "o-", color=f"C{i}", label=schedule)
        for v, style in ((1, "--"), (2, ":")):
            points = {r["m"]: r["theory"] for r in mine if r["v"] == v}
            ax.plot(
                list(points),
                list(points.values()),
                style,
                color="grey",
                label=f"theory (p-1)/({'' if v == 1 else v}m+p-1)",
            )
        ax.set_xticks(sorted({r["m"] for r in mine}))
        ax.set_xlabel("micro-batches m")
        ax.set_ylabel("idle fraction of the step (mean over ranks)")
        ax.set_title(f"pp={pp}" + (" (4 processes on 2 cores: oversubscribed)" if pp > 2 else ""))
        ax.legend(fontsize=7)
    fig.suptitle(
        "Pipeline bubble: GPT d256 x 8 blocks, ctx 128, 4 sequences per micro-batch (benchmarks/pipeline/pipeline.py)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
