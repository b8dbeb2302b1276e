"""Sea-ice metrics: a hand-worked example, a numpy reference, and 3 real ranks vs one process.

Run: ``.venv/bin/python -m pytest tests/test_seaice_metrics.py -q``

The hand example is small enough to check on paper (numbers in the comments). The
multi-process test splits 10 forecasts unequally over 3 ranks (one rank empty), sums with
``all_reduce`` as the trainer does, and compares with the parent's single-process result.
"""

import math

import numpy as np
import pytest
import torch

from neural_arch.apps.icenet.metrics import SUM_FIELDS, finalize, seaice_sums, sic_to_ice
from neural_arch.distributed import all_reduce, init_process_group
from tests.helpers.multiproc import run_ranks

AREA = 625.0  # km^2: a 25 km EASE grid cell


def hand_example():
    """2 forecasts x 2 leads on a 3x3 grid whose cell (0, 0) is land."""
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[0, 0] = False
    T, F = True, False
    sic = torch.zeros(2, 2, 3, 3, dtype=torch.float64)
    pred = torch.zeros(2, 2, 3, 3, dtype=torch.bool)
    # f0 lead0: land says ice (0.9) but is predicted water: must be ignored. Active truth has
    # 4 ice cells (0.9, 0.5, exactly 0.15, 0.2; 0.14 is water); prediction has 4 as well,
    # disagreeing at (0,2) and (1,2): wrong 2, correct 6, |4-4| = 0.
    sic[0, 0] = torch.tensor([[0.9, 0.9, 0.5], [0.1, 0.15, 0.0], [0.0, 0.2, 0.14]])
    pred[0, 0] = torch.tensor([[F, T, F], [F, T, T], [F, T, F]])
    # f0 lead1: no true ice, 3 predicted cells (+ land predicted ice, ignored):
    # wrong 3, correct 5, |3-0| = 3.
    pred[0, 1] = torch.tensor([[T, T, T], [T, F, F], [F, F, F]])
    # f1 lead0: all ice, predicted everywhere but (2,2): wrong 1, correct 7, |7-8| = 1.
    sic[1, 0] = 1.0
    pred[1, 0] = True
    pred[1, 0, 2, 2] = False
    # f1 lead1: 5 true ice cells, 2 predicted of which one is right:
    # wrong 4 + 1 = 5, correct 3, |2-5| = 3 (opposite sign to f0 lead1: abs per forecast).
    sic[1, 1] = torch.tensor([[0.0, 0.3, 0.3], [0.3, 0.3, 0.3], [0.0, 0.0, 0.0]])
    pred[1, 1] = torch.tensor([[F, T, F], [F, F, F], [T, F, F]])
    return pred, sic, mask


def test_hand_example_sums():
    pred, sic, mask = hand_example()
    got = seaice_sums(pred, sic, mask, AREA)
    assert got.dtype == torch.float64 and got.shape == (2, len(SUM_FIELDS))
    want = torch.tensor(
        [
            # correct, active, |SIE error| km^2,  IIEE km^2,           forecasts
            [6 + 7, 16, (0 + 1) * AREA, (2 + 1) * AREA, 2],  # lead 0
            [5 + 3, 16, (3 + 3) * AREA, (3 + 5) * AREA, 2],  # lead 1
        ],
        dtype=torch.float64,
    )
    assert torch.equal(got, want)


def test_hand_example_finalize():
    pred, sic, mask = hand_example()
    got = finalize(seaice_sums(pred, sic, mask, AREA))
    assert got == {
        "binary_accuracy": [13 / 16, 8 / 16],
        "sie_error_km2": [312.5, 1875.0],
        "iiee_km2": [937.5, 2500.0],
    }


def test_sic_to_ice_threshold():
    sic = torch.tensor([0.0, 0.1499999, 0.15, 0.8, float("nan")])
    assert sic_to_ice(sic).tolist() == [False, False, True, True, False]


def test_no_forecasts_gives_zero_sums_and_nan_means():
    pred, sic, mask = hand_example()
    sums = seaice_sums(pred[:0], sic[:0], mask, AREA)
    assert sums.shape == (2, len(SUM_FIELDS)) and torch.equal(sums, torch.zeros_like(sums))
    for values in finalize(sums).values():
        assert len(values) == 2 and all(math.isnan(v) for v in values)


def random_forecasts(n, leads=3, h=12, w=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(h, w, generator=g) > 0.25
    sic = torch.rand(n, leads, h, w, generator=g, dtype=torch.float64)
    sic = torch.where(torch.rand(sic.shape, generator=g) < 0.4, torch.zeros_like(sic), sic)
    pred = torch.rand(n, leads, h, w, generator=g) < 0.5
    return pred, sic, mask


def numpy_reference(pred, sic, mask, area):
    """Loop over forecasts and leads, as the definitions read."""
    pred, sic, mask = pred.numpy(), sic.numpy(), mask.numpy()
    n, leads = pred.shape[:2]
    acc, sie, iiee = [], [], []
    for lead in range(leads):
        correct = active = 0
        sie_sum = iiee_sum = 0.0
        for f in range(n):
            p, t = pred[f, lead][mask], (sic[f, lead] >= 0.15)[mask]
            correct += int((p == t).sum())
            active += int(mask.sum())
            sie_sum += abs(int(p.sum()) - int(t.sum())) * area
            iiee_sum += int((p != t).sum()) * area
        acc.append(correct / active)
        sie.append(sie_sum / n)
        iiee.append(iiee_sum / n)
    return {"binary_accuracy": acc, "sie_error_km2": sie, "iiee_km2": iiee}


def assert_metrics_close(got, want, rel):
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=rel, atol=0, err_msg=key)


def test_random_forecasts_match_numpy_loop():
    pred, sic, mask = random_forecasts(10)
    got = finalize(seaice_sums(pred, sic, mask, 612.3))
    assert_metrics_close(got, numpy_reference(pred, sic, mask, 612.3), rel=1e-12)


def test_bad_inputs_raise_value_error():
    pred, sic, mask = hand_example()
    with pytest.raises(ValueError, match="must be a bool tensor"):
        seaice_sums(pred.double(), sic, mask, AREA)
    with pytest.raises(ValueError, match="same shape"):
        seaice_sums(pred[:, :1], sic, mask, AREA)
    with pytest.raises(ValueError, match="active_mask"):
        seaice_sums(pred, sic, mask[:2], AREA)
    with pytest.raises(ValueError, match="cell_area_km2"):
        seaice_sums(pred, sic, mask, 0.0)
    with pytest.raises(ValueError, match="sums must be"):
        finalize(torch.zeros(2, 3))


SHARES = [7, 0, 3]  # unequal, the middle rank has no forecasts


def metrics_worker(rank, world_size, pred, sic, mask, area):
    # numpy in and out: torch tensors cross process boundaries via shared memory that
    # dies with the (exiting) child.
    pred, sic, mask = torch.from_numpy(pred), torch.from_numpy(sic), torch.from_numpy(mask)
    init_process_group(backend="gloo")
    lo = sum(SHARES[:rank])
    local = seaice_sums(pred[lo : lo + SHARES[rank]], sic[lo : lo + SHARES[rank]], mask, area)
    total = all_reduce(local)  # SUM: what the trainer does at the end of validation
    return local.numpy(), total.numpy(), finalize(total)


@pytest.mark.multiprocess
def test_three_ranks_with_unequal_shares_match_one_process():
    pred, sic, mask = random_forecasts(sum(SHARES), seed=3)
    area = 612.3
    want_sums = seaice_sums(pred, sic, mask, area)
    want = finalize(want_sums)
    assert_metrics_close(want, numpy_reference(pred, sic, mask, area), rel=1e-12)  # the reference itself is right
    args = (pred.numpy(), sic.numpy(), mask.numpy(), area)
    results = run_ranks(metrics_worker, 3, args=args, timeout=90)
    assert not results[1][0].any()  # the empty rank really held nothing
    assert results[0][0][0, -1] == 7 and results[2][0][0, -1] == 3  # ... and the others their shares
    for rank, (_, total, got) in enumerate(results):
        np.testing.assert_allclose(total, want_sums.numpy(), rtol=1e-12, atol=0, err_msg=f"rank {rank}")
        assert_metrics_close(got, want, rel=1e-12)
