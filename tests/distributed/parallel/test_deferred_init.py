"""A deferred build allocates nothing until materialized, then equals a plain build bit for bit.

Run: ``.venv/bin/python -m pytest tests/distributed/parallel/test_deferred_init.py -q``
Each model is built twice from the same seed, plainly and deferred; every tensor must be
``torch.equal``, the random stream after the build the same (what is built after it, e.g. data
order or dropout, is unchanged), and materializing must not move the stream.
"""

import pytest
import torch
from torch import nn

from neural_arch.apps.gpt.model import GPT
from neural_arch.apps.icenet.model import IceNetUNet
from neural_arch.apps.regression.model import MLP
from neural_arch.distributed.parallel.deferred_init import build_deferred, deferred


class Unusual(nn.Module):
    """Initialisation patterns a plain meta-device build gets wrong or cannot replay."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 6, padding_idx=2)  # zeroes a row through a view
        self.head = nn.Linear(6, 10)
        self.head.weight = self.embed.weight  # tied
        self.mix = nn.Linear(6, 6)
        nn.init.trunc_normal_(self.mix.weight, std=0.5)  # skips meta tensors; reads its samples
        self.rot = nn.Linear(4, 4, bias=False)
        nn.init.orthogonal_(self.rot.weight)  # skips meta tensors; a QR of fresh samples
        with torch.no_grad():
            self.mix.weight[1:3, ::2].mul_(3.0).add_(1.0)  # in place on a strided view
            self.mix.bias.copy_(torch.arange(6.0))  # from a real tensor
        self.register_buffer("mask", torch.tril(torch.ones(4, 4)))
        self.norm = nn.BatchNorm1d(6)
        self.conv = nn.Conv2d(3, 4, 3)
        self.scale = nn.Parameter(torch.randn(5) * 0.1)  # real from the start
        self.double()  # stays deferred: a conversion is recorded, not run


def seeded(make):
    def build() -> nn.Module:
        torch.manual_seed(3)
        return make()

    return build


MODELS = {
    "unusual": Unusual,
    "gpt": lambda: GPT(d_model=32, n_layers=3, n_heads=4, mlp_ratio=4, dropout=0.1, positional="learned", context=16),
    "gpt_rotary": lambda: GPT(d_model=32, n_layers=2, n_heads=4, mlp_ratio=2, dropout=0.0, positional="rotary"),
    "icenet": lambda: IceNetUNet(5, leads=2, widths=(4, 8), dropout=0.1),
    "mlp": lambda: MLP(features=8, targets=2, hidden=16, depth=3).double(),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_deferred_build_equals_plain_build(name):
    build = seeded(MODELS[name])
    plain = build()
    after_plain = torch.get_rng_state()
    model, materialize = build_deferred(build)
    assert torch.equal(torch.get_rng_state(), after_plain), "the build must consume the random stream alike"
    assert deferred(model)
    before = torch.get_rng_state()
    for block in model.children():  # part by part, as a sharded layout does
        materialize(block)
    materialize(model)
    assert not deferred(model)
    assert torch.equal(torch.get_rng_state(), before), "materializing must not draw from the stream"
    want, got = plain.state_dict(), model.state_dict()
    assert list(got) == list(want)
    for key, value in want.items():
        assert got[key].dtype == value.dtype and torch.equal(got[key], value), key


def test_nothing_is_allocated_before_materializing():
    model, materialize = build_deferred(seeded(MODELS["gpt"]))
    sizes = [p.numel() for p in model.parameters() if deferred(nn.ParameterList([p]))]
    assert sum(sizes) == sum(p.numel() for p in model.parameters())  # every parameter is deferred
    materialize(model.blocks[0])
    assert not deferred(model.blocks[0]) and deferred(model.blocks[1])


def test_tied_weights_stay_one_parameter():
    """Materializing one user of a tied weight replaces it in the other too (a tensor-parallel
    plan may touch the head before anything touches the embedding)."""
    model, materialize = build_deferred(seeded(Unusual))
    materialize(model.head)
    assert model.head.weight is model.embed.weight and not deferred(model.embed)


def test_using_a_deferred_parameter_names_the_fix():
    model, _ = build_deferred(seeded(MODELS["mlp"]))
    with pytest.raises(RuntimeError, match="never materialized"):
        model(torch.zeros(2, 8, dtype=torch.float64))


def test_a_write_through_out_cannot_be_deferred():
    def build() -> nn.Module:
        torch.manual_seed(0)
        lin = nn.Linear(3, 3)
        torch.add(torch.ones(3, 3), 1.0, out=lin.weight.data)
        return lin

    with pytest.raises(NotImplementedError, match="writes into a deferred tensor"):
        build_deferred(build)
