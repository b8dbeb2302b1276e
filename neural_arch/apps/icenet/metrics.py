"""Sea-ice forecast metrics per lead: binary accuracy, sea-ice extent error, IIEE.

Use::

    from neural_arch.apps.icenet.metrics import seaice_sums, finalize, sic_to_ice
    from neural_arch.distributed import all_reduce
    sums = sum(seaice_sums(ice_probability(model(x)) >= 0.5, sic, mask, 625.0) for x, sic in batches)
    metrics = finalize(all_reduce(sums))   # {"binary_accuracy": [...per lead], ...}

Pure tensor math with **no collectives inside**: :func:`seaice_sums` returns additive
float64 sums, and the caller adds them over batches and then across ranks with one
``all_reduce(sums)`` (SUM). Only sums are reduced, never per-rank means, so the result is
the same for any split of the forecasts over ranks (a rank with no forecasts contributes
zeros) and equals the single-process value up to float64 rounding. :func:`finalize`
turns the global sums into means.

Definitions (all over *active* cells, i.e. ocean cells of ``active_mask``; ice means
SIC >= 15 %, :func:`sic_to_ice`):

* binary accuracy: fraction of active cells whose predicted ice/no-ice matches the truth;
* sea-ice extent (SIE) error: mean over forecasts of ``|predicted extent - true extent|``,
  extent = area of active cells with ice (km^2);
* integrated ice-edge error (IIEE, Goessling et al. 2016): mean over forecasts of the area
  of active cells where prediction and truth disagree (km^2). Always >= the SIE error.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

SUM_FIELDS = ("correct_cells", "active_cells", "sie_abs_error_km2", "iiee_km2", "forecasts")
ICE_THRESHOLD = 0.15  # SIC fraction at and above which a cell counts as ice


def sic_to_ice(sic: Tensor) -> Tensor:
    """Bool ice mask: ``sic >= 0.15`` (SIC as a fraction 0..1; NaN counts as no ice)."""
    return sic >= ICE_THRESHOLD


def seaice_sums(pred_ice: Tensor, true_sic: Tensor, active_mask: Tensor, cell_area_km2: float) -> Tensor:
    """Additive sums ``float64 [leads, len(SUM_FIELDS)]`` over the ``n`` forecasts given.

    ``pred_ice`` bool ``[n, leads, H, W]`` (e.g. ``ice_probability(logits) >= 0.5``),
    ``true_sic`` float ``[n, leads, H, W]`` (fraction), ``active_mask`` bool ``[H, W]``,
    ``cell_area_km2`` the (equal-area grid) cell area. Columns follow :data:`SUM_FIELDS`.
    ``n == 0`` gives zeros, so ranks without data can still join the ``all_reduce``.
    """
    if pred_ice.dtype != torch.bool:
        raise ValueError(
            f"pred_ice must be a bool tensor, got {pred_ice.dtype}; threshold probabilities "
            "first (ice_probability(logits) >= 0.5) or use sic_to_ice(predicted_sic)."
        )
    if pred_ice.dim() != 4 or pred_ice.shape != true_sic.shape:
        raise ValueError(
            f"pred_ice and true_sic must both be [n, leads, H, W] with the same shape, got "
            f"{list(pred_ice.shape)} and {list(true_sic.shape)}."
        )
    if active_mask.dtype != torch.bool or list(active_mask.shape) != list(pred_ice.shape[2:]):
        raise ValueError(
            f"active_mask must be a bool [H, W] = {list(pred_ice.shape[2:])} tensor, got "
            f"{active_mask.dtype} {list(active_mask.shape)}."
        )
    if not (cell_area_km2 > 0 and math.isfinite(cell_area_km2)):
        raise ValueError(f"cell_area_km2 must be a positive finite number, got {cell_area_km2}.")
    n, leads = pred_ice.shape[0], pred_ice.shape[1]
    active = active_mask.to(pred_ice.device)
    pred = pred_ice & active
    true = sic_to_ice(true_sic) & active
    # Integer cell counts first (exact), converted to km^2 once at the end.
    pred_cells = pred.sum(dim=(2, 3))  # [n, leads] int64
    true_cells = true.sum(dim=(2, 3))
    wrong = (pred != true).sum(dim=(2, 3))  # inactive cells are False in both, never wrong
    active_count = int(active.sum())
    out = torch.zeros(leads, len(SUM_FIELDS), dtype=torch.float64, device=pred_ice.device)
    out[:, 0] = (n * active_count - wrong.sum(dim=0)).double()
    out[:, 1] = float(n * active_count)
    out[:, 2] = (pred_cells - true_cells).abs().sum(dim=0).double() * cell_area_km2
    out[:, 3] = wrong.sum(dim=0).double() * cell_area_km2
    out[:, 4] = float(n)
    return out


def finalize(sums: Tensor) -> dict[str, list[float]]:
    """Global sums (after the all_reduce) to per-lead means; NaN for a lead with no forecasts.

    Returns ``{"binary_accuracy": [...], "sie_error_km2": [...], "iiee_km2": [...]}``, one
    value per lead: accuracy as a fraction, errors as mean km^2 per forecast.
    """
    if sums.dim() != 2 or sums.shape[1] != len(SUM_FIELDS):
        raise ValueError(f"sums must be [leads, {len(SUM_FIELDS)}] as returned by seaice_sums, got {list(sums.shape)}.")
    s = sums.detach().double().cpu()
    col = {name: s[:, i].tolist() for i, name in enumerate(SUM_FIELDS)}

    def ratio(num: list[float], den: list[float]) -> list[float]:
        return [a / b if b > 0 else math.nan for a, b in zip(num, den)]

    return {
        "binary_accuracy": ratio(col["correct_cells"], col["active_cells"]),
        "sie_error_km2": ratio(col["sie_abs_error_km2"], col["forecasts"]),
        "iiee_km2": ratio(col["iiee_km2"], col["forecasts"]),
    }
