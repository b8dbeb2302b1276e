"""IceNet U-Net and its per-sample masked loss: shapes, TorchScript, and split-exactness.

Run: ``.venv/bin/python -m pytest tests/test_icenet_model.py -q``

The framework promises that N ranks compute what one process does on the same global
batch. For this model that needs (a) each sample's output independent of the rest of the
batch (GroupNorm, no BatchNorm) and (b) a per-sample loss, so any split of a batch sums
to the whole. Both are checked here in float64 against the unsplit computation.
"""

import pytest
import torch
from torch import nn

from neural_arch.apps.icenet.model import (
    IceNetUNet,
    ice_probability,
    masked_weighted_cross_entropy,
    sic_to_class,
)

C_IN, LEADS, CLASSES = 4, 2, 3
WIDTHS = (4, 8, 8)  # tiny: the test machine has 2 cores


def make_model(dtype=torch.float64) -> IceNetUNet:
    torch.manual_seed(0)
    return IceNetUNet(C_IN, leads=LEADS, widths=WIDTHS, classes=CLASSES).to(dtype)


def make_batch(n: int, h: int = 9, w: int = 11, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, C_IN, h, w, generator=g, dtype=torch.float64)
    target = torch.randint(0, CLASSES, (n, LEADS, h, w), generator=g)
    mask = torch.rand(h, w, generator=g) > 0.3
    mask[0, 0] = False  # at least one land cell
    return x, target, mask


@pytest.mark.parametrize("hw", [(15, 17), (48, 48), (1, 1), (5, 8)])
def test_output_shape_any_size(hw):
    model = make_model(torch.float32)
    out = model(torch.randn(2, C_IN, *hw))
    assert out.shape == (2, LEADS, CLASSES, *hw)
    assert torch.isfinite(out).all()


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torchscript_matches_eager():
    model = make_model(torch.float32).eval()
    scripted = torch.jit.script(model)
    x = torch.randn(3, C_IN, 15, 17)
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), model(x), rtol=0, atol=1e-6)


def test_output_of_a_sample_ignores_the_rest_of_the_batch():
    model = make_model().train()  # train mode: where BatchNorm would use batch statistics
    x, _, _ = make_batch(5)
    whole = model(x)
    for i in range(5):
        torch.testing.assert_close(whole[i : i + 1], model(x[i : i + 1]), rtol=0, atol=1e-6)


def test_batch_independence_check_catches_batchnorm():
    """The check above would fail for a BatchNorm U-Net: it is sensitive to the thing it guards."""
    model = make_model().train()
    for _name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            if isinstance(child, nn.GroupNorm):
                setattr(mod, child_name, nn.BatchNorm2d(child.num_channels).double())
    x, _, _ = make_batch(5)
    diff = (model(x)[0:1] - model(x[0:1])).abs().max().item()
    assert diff > 1e-3


def test_ice_probability_is_p1_plus_p2():
    logits = torch.randn(2, LEADS, CLASSES, 4, 5, dtype=torch.float64)
    p = torch.softmax(logits, dim=2)
    torch.testing.assert_close(ice_probability(logits), p[:, :, 1] + p[:, :, 2], rtol=0, atol=1e-15)
    # A cell certain to be open water has ice probability ~0.
    logits[0, 0, 0, 0, 0], logits[0, 0, 1:, 0, 0] = 50.0, -50.0
    assert ice_probability(logits)[0, 0, 0, 0] < 1e-20


def test_sic_to_class_thresholds():
    sic = torch.tensor([0.0, 0.1499, 0.15, 0.5, 0.7999, 0.8, 1.0])
    assert sic_to_class(sic).tolist() == [0, 0, 1, 1, 1, 2, 2]


def test_loss_matches_hand_computation():
    x, target, mask = make_batch(3)
    logits = make_model()(x)
    weights = torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64)
    got = masked_weighted_cross_entropy(logits, target, mask, weights)
    logp = torch.log_softmax(logits.detach(), dim=2)
    for i in range(3):
        total = 0.0
        for lead in range(LEADS):
            for r, c in mask.nonzero().tolist():
                k = int(target[i, lead, r, c])
                total += -float(logp[i, lead, k, r, c]) * float(weights[k])
        want = total / (int(mask.sum()) * LEADS)  # cell count, not sum of weights
        assert got[i].item() == pytest.approx(want, rel=1e-12)


def test_loss_is_per_sample_exactly():
    x, target, mask = make_batch(6)
    logits = make_model()(x)
    weights = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    whole = masked_weighted_cross_entropy(logits, target, mask, weights)
    assert whole.shape == (6,)
    singles = torch.cat(
        [masked_weighted_cross_entropy(logits[i : i + 1], target[i : i + 1], mask, weights) for i in range(6)]
    )
    assert torch.equal(whole, singles)


def test_land_cells_do_not_contribute():
    x, target, mask = make_batch(2)
    logits = make_model()(x).detach()
    base = masked_weighted_cross_entropy(logits, target, mask)
    land = ~mask
    logits2, target2 = logits.clone(), target.clone()
    logits2[:, :, :, land] = torch.randn_like(logits2[:, :, :, land]) * 10
    target2[:, :, land] = -1  # even an invalid class on land is ignored
    assert torch.equal(masked_weighted_cross_entropy(logits2, target2, mask), base)
    # ... and land logits get exactly zero gradient.
    logits2.requires_grad_(True)
    masked_weighted_cross_entropy(logits2, target2, mask).sum().backward()
    assert logits2.grad[:, :, :, land].abs().max() == 0
    assert logits2.grad[:, :, :, mask].abs().max() > 0
    # Changing an ocean cell does change the loss (the comparison above is not vacuous).
    logits3 = logits.clone()
    r, c = mask.nonzero()[0].tolist()
    logits3[:, :, :, r, c] += torch.tensor([5.0, -5.0, 0.0], dtype=torch.float64).view(1, 1, 3)
    assert not torch.equal(masked_weighted_cross_entropy(logits3, target, mask), base)


def test_class_weights_scale_their_class():
    x, target, mask = make_batch(2)
    logits = make_model()(x).detach()
    target = torch.zeros_like(target)  # every cell is class 0
    plain = masked_weighted_cross_entropy(logits, target, mask)
    w = torch.tensor([3.0, 1.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(masked_weighted_cross_entropy(logits, target, mask, w), 3.0 * plain, rtol=1e-14, atol=0)
    w_other = torch.tensor([1.0, 7.0, 9.0], dtype=torch.float64)  # weights of absent classes: no effect
    torch.testing.assert_close(masked_weighted_cross_entropy(logits, target, mask, w_other), plain, rtol=1e-14, atol=0)


def test_empty_batch_forward_and_backward():
    model = make_model()
    x, target, mask = make_batch(0)
    out = model(x)
    assert out.shape == (0, LEADS, CLASSES, 9, 11)
    loss = masked_weighted_cross_entropy(out, target, mask)
    assert loss.shape == (0,) and loss.requires_grad
    loss.sum().backward()
    # Every parameter gets a (zero) gradient, so DDP's all-reduce has something to reduce.
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().max() == 0, name


def test_gradient_reaches_every_parameter():
    model = make_model()
    x, target, mask = make_batch(2)
    masked_weighted_cross_entropy(model(x), target, mask).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().max() > 0, name


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def test_batch_split_in_chunks_equals_whole_batch():
    """What ranks do: sum per-sample losses of uneven (and empty) chunks / global count."""
    n = 7
    x, target, mask = make_batch(n)
    weights = torch.tensor([1.0, 2.5, 4.0], dtype=torch.float64)
    model = make_model()
    whole = masked_weighted_cross_entropy(model(x), target, mask, weights)
    whole.mean().backward()
    want_grads = _grads(model)

    model.zero_grad()
    parts, total = [], torch.zeros((), dtype=torch.float64)
    for lo, hi in [(0, 3), (3, 3), (3, 4), (4, 7)]:  # sizes 3, 0, 1, 3
        per_sample = masked_weighted_cross_entropy(model(x[lo:hi]), target[lo:hi], mask, weights)
        parts.append(per_sample.detach())
        (per_sample.sum() / n).backward()  # gradients accumulate like DDP's SUM all-reduce
        total = total + per_sample.detach().sum()
    # Per-sample values are identical to the whole batch's, to within float64 rounding.
    torch.testing.assert_close(torch.cat(parts), whole.detach(), rtol=1e-12, atol=0)
    assert (total / n).item() == pytest.approx(whole.mean().item(), rel=1e-12)
    for got, ref in zip(_grads(model), want_grads):
        torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-12)


def test_bad_inputs_raise_value_error():
    x, target, mask = make_batch(2)
    logits = make_model()(x)
    with pytest.raises(ValueError, match="target_class must have shape"):
        masked_weighted_cross_entropy(logits, target[:, :1], mask)
    with pytest.raises(ValueError, match="active_mask"):
        masked_weighted_cross_entropy(logits, target, mask.float())
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        masked_weighted_cross_entropy(logits, torch.full_like(target, 3), mask)
    with pytest.raises(ValueError, match="expects input"):
        make_model()(x[0])
