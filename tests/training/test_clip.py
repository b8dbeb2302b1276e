"""Gradient clipping (``training.grad_clip``) scales the gradients, as torch's clip_grad_norm_ does.

Run: ``.venv/bin/python -m pytest tests/training/test_clip.py -q``
(It once did nothing: the gradients were passed where torch expects parameters.)
"""

import torch
from torch import nn

from neural_arch.training.step import clip_to


def _model_with_grads(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2)).double()
    model(torch.randn(5, 4, dtype=torch.float64)).pow(2).sum().mul(100).backward()
    return model


def test_clip_to_equals_clip_grad_norm_bitwise():
    ours, theirs = _model_with_grads(0), _model_with_grads(0)
    params = list(ours.parameters())
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    assert norm > 1.0  # so that clipping to 1 changes something
    clip_to(params, 1.0, norm)
    torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a.grad, b.grad)
    clipped = torch.nn.utils.get_total_norm([p.grad for p in params])
    assert abs(float(clipped) - 1.0) < 1e-5


def test_clip_to_leaves_small_gradients_alone():
    model = _model_with_grads(1)
    params = list(model.parameters())
    before = [p.grad.clone() for p in params]
    clip_to(params, 1e9, torch.nn.utils.get_total_norm([p.grad for p in params]))
    assert all(torch.equal(a, p.grad) for a, p in zip(before, params))
