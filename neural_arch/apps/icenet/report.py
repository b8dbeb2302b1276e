"""The sea-ice run's report: metrics vs baselines, forecast maps, loss curve, scaling line.

Written by the trainer on rank 0 at the end of an icenet run (``make run`` ->
``runs/icenet/report.md`` with ``forecast.png`` and ``loss.png`` beside it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import neural_arch.distributed as nd
from neural_arch.apps.icenet.metrics import sic_to_ice
from neural_arch.apps.icenet.model import ice_probability
from neural_arch.apps.icenet.synth import SOURCE

LABELS = {
    "binary_accuracy": ("binary accuracy", "{:.2%}"),
    "sie_error_km2": ("SIE error (km²)", "{:,.0f}"),
    "iiee_km2": ("IIEE (km²)", "{:,.0f}"),
}


def _table(final: dict[str, float], leads: int) -> list[str]:
    head = "| lead | forecaster | " + " | ".join(label for label, _ in LABELS.values()) + " |"
    rows = [head, "|" + "---|" * (2 + len(LABELS))]
    for lead in range(1, leads + 1):
        for name in ("model", "persistence", "climatology"):
            cells = [fmt.format(final[f"val/{name}/{metric}/lead{lead}"]) for metric, (_, fmt) in LABELS.items()]
            who = "**U-Net**" if name == "model" else name
            rows.append(f"| {lead} | {who} | " + " | ".join(cells) + " |")
    return rows


def mean_accuracy(final: dict[str, float], name: str, leads: int) -> float:
    """Binary accuracy averaged over lead months."""
    return float(np.mean([final[f"val/{name}/binary_accuracy/lead{lead}"] for lead in range(1, leads + 1)]))


def data_line(source: str, path: Path) -> str:
    """Where the months came from: synthetic ones (``--create-data``) are said to be so, first."""
    if source == SOURCE:
        return (
            f"Data: **synthetic** ({path}, made by `--create-data`): IceNet-style months with the structure of "
            "the real inputs, not observations. The numbers below show that the model and the pipeline learn; "
            "they say nothing about forecasting real sea ice."
        )
    return f"Data: {path} (source: {source or 'not stated in the store'})."


def _pick_sample(task: Any) -> int:
    """A validation forecast started in June (melt season: persistence struggles most)."""
    june = [i for i, m in enumerate(task.val.init_months.tolist()) if m % 12 == 5]
    return june[0] if june else 0


@torch.no_grad()
def plot_forecast(path: Path, task: Any, model: nn.Module) -> None:
    """Truth / forecast / error maps for one validation month at the first and last lead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    i = _pick_sample(task)
    batch = task.batch("val", torch.tensor([i]), next(model.parameters()).device)  # the model's device (a GPU too)
    was_training = model.training
    model.eval()
    prob = ice_probability(model(batch["x"]).float())[0].cpu()
    model.train(was_training)
    if nd.get_rank() != 0:
        return  # the forward above is every rank's part; drawing is rank 0's
    truth, land = batch["target_sic"][0].cpu(), task.train.land_mask
    leads = sorted({0, truth.shape[0] - 1})
    fig, axes = plt.subplots(len(leads), 3, figsize=(10, 3.4 * len(leads)), squeeze=False)
    errors = ListedColormap(["#2166ac", "#f7f7f7", "#b2182b"])
    for row, lead in enumerate(leads):
        true_ice = sic_to_ice(truth[lead]).float()
        pred_ice = (prob[lead] > 0.5).float()
        panels = [
            (truth[lead], "Blues_r", f"truth: ice concentration, lead {lead + 1}", (0, 1)),
            (prob[lead], "Blues_r", f"forecast: P(ice), lead {lead + 1}", (0, 1)),
            (pred_ice - true_ice, errors, "error: red = false ice, blue = missed ice", (-1, 1)),
        ]
        for ax, (field, cmap, title, (lo, hi)) in zip(axes[row], panels):
            shown = np.ma.masked_where(land.numpy(), field.numpy())
            ax.imshow(shown, cmap=cmap, vmin=lo, vmax=hi)
            ax.imshow(np.ma.masked_where(~land.numpy(), land.numpy()), cmap=ListedColormap(["#8c7b5b"]))
            ax.set_title(title, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
    start = task.val.month_label(int(batch["init_month"][0]))
    fig.suptitle(f"validation forecast initialised {start} (land in brown)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    run_dir: Path, task: Any, model: nn.Module, final: dict[str, float], throughput: dict[str, float]
) -> Path:
    """Write report.md (+ forecast.png) on rank 0 and return its path. Every rank that calls it runs
    the forecast's forward alike: with a sharded model it is a collective."""
    leads = task.cfg.data.leads
    plot_forecast(run_dir / "forecast.png", task, model)
    if nd.get_rank() != 0:
        return run_dir / "report.md"
    ours, persistence = mean_accuracy(final, "model", leads), mean_accuracy(final, "persistence", leads)
    verdict = "beats" if ours > persistence else "does NOT beat"
    lines = [
        "# Sea-ice forecast report",
        "",
        data_line(task.train.source, task.train.path),
        "",
        f"The U-Net {verdict} persistence on validation binary accuracy: {ours:.2%} vs {persistence:.2%} "
        f"(mean over {leads} lead months; climatology {mean_accuracy(final, 'climatology', leads):.2%}).",
        "",
        f"Validation: {task.val_size} forecasts; training: {task.train_size} forecasts on a "
        f"{task.cfg.data.grid}x{task.cfg.data.grid} grid of {task.train.cell_area_km2:,.0f} km² cells; "
        f"validation loss {final['val/loss']:.4f}.",
        "",
        *_table(final, leads),
        "",
        "Binary accuracy: share of active (ocean) cells where the forecast gets ice (concentration >= 15%) right. "
        "SIE error: mean absolute error of the sea-ice extent per forecast. IIEE: integrated ice-edge error, "
        "the area where forecast and truth disagree about ice, per forecast.",
        "",
        "![forecast maps](forecast.png)",
        "",
        "![loss](loss.png)",
        "",
        f"Scaling: {int(throughput['processes'])} process(es), {throughput['samples_per_s']:.1f} samples/s "
        "(training throughput of this run; benchmarks/sea_ice_scaling/ compares process counts).",
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines))
    print(f"report: {path} (U-Net {ours:.2%} vs persistence {persistence:.2%} binary accuracy)", flush=True)
    return path
