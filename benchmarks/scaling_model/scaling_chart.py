"""scaling_model.py's chart (not run on its own): ``chart(profiles, path)``.

One panel per model: predicted weak-scaling efficiency against the number of ranks
(1 ... 1024, log scale) on every link of scaling_math.LINKS; solid without compression,
dashed with PowerSGD rank 4.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display on this machine
import matplotlib.pyplot as plt

from benchmarks.scaling_model.scaling_math import LINKS, efficiency

NS = [2**k for k in range(11)]


def chart(profiles: dict[str, dict[str, Any]], path: str) -> None:
    fig, axes = plt.subplots(1, len(profiles), figsize=(6 * len(profiles), 4.8), squeeze=False)
    for ax, (name, prof) in zip(axes[0], profiles.items()):
        for i, link in enumerate(LINKS):
            for comp, style in (("none", "-"), ("powersgd4", "--")):
                label = link.name if comp == "none" else None
                ax.plot(NS, [efficiency(prof, n, link, comp) for n in NS], style, color=f"C{i}", label=label)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("data-parallel ranks N")
        ax.set_ylabel("efficiency: step(1) / step(N)")
        grad_mb = sum(prof["bytes"]) / 1e6
        ax.set_title(f"{name}: {grad_mb:.1f} MB gradients, {prof['batch']} samples/rank")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="solid: exact; dashed: PowerSGD r=4", title_fontsize=7)
    fig.suptitle(
        "Predicted weak scaling, ring all-reduce with bucketed backward overlap; compute = one core here "
        "(benchmarks/scaling_model/scaling_model.py)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
