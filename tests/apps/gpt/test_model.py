"""The GPT model: causal, weight-tied, both position encodings, regular blocks.

Run: ``.venv/bin/python -m pytest tests/apps/gpt/test_model.py -q``
"""

import pytest
import torch

from neural_arch.apps.gpt.model import GPT, Block, count_parameters, generate


def tiny(positional: str, n_layers: int = 2) -> GPT:
    torch.manual_seed(0)
    return GPT(d_model=16, n_layers=n_layers, n_heads=2, mlp_ratio=2, positional=positional, context=12).double().eval()


@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_a_later_byte_never_changes_earlier_logits(positional):
    model = tiny(positional)
    x = torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(1))
    changed = x.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 256
    a, b = model(x), model(changed)
    assert a.shape == (3, 12, 256)
    assert torch.equal(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_positions_matter(positional):
    """One block of causal attention without positions sees its prefix as a set: swapping two
    earlier bytes would not change the last logits. Both encodings make it change."""
    model = tiny(positional, n_layers=1)
    x = torch.tensor([[65, 66, 67, 68, 69, 70]])
    swapped = x[:, [1, 0, 2, 3, 4, 5]]
    assert not torch.allclose(model(x)[0, -1], model(swapped)[0, -1])
    if positional == "learned":  # the control: with the positions zeroed, the swap is invisible
        with torch.no_grad():
            model.pos.weight.zero_()
        torch.testing.assert_close(model(x)[0, -1], model(swapped)[0, -1], rtol=0, atol=1e-12)


def test_head_is_tied_to_the_embedding_and_counted_once():
    model = tiny("learned")
    assert model.head.weight is model.embed.weight
    names = {n for n, _ in model.named_parameters()}
    assert "head.weight" not in names  # deduplicated: one matrix, one gradient
    assert count_parameters(model) == sum(p.numel() for n, p in model.state_dict().items() if n != "head.weight")
    model(torch.zeros(1, 4, dtype=torch.long)).sum().backward()
    assert model.embed.weight.grad is not None


def test_blocks_are_one_module_list_of_identical_blocks():
    model = tiny("rotary")
    assert len(model.blocks) == 2 and all(type(b) is Block for b in model.blocks)
    shapes = [[p.shape for p in b.parameters()] for b in model.blocks]
    assert shapes[0] == shapes[1]
    assert not any("cos" in k or "sin" in k for k in model.state_dict())  # derived buffers are not saved


def test_too_long_input_is_refused():
    with pytest.raises(ValueError, match="context is 12"):
        tiny("rotary")(torch.zeros(1, 13, dtype=torch.long))


def test_generate_is_reproducible_and_greedy_is_deterministic():
    model = tiny("rotary")
    greedy = generate(model, b"abc", 20, temperature=0)
    assert len(greedy) == 20 and generate(model, b"abc", 20, temperature=0) == greedy
    one = generate(model, b"abc", 20, top_k=5, generator=torch.Generator().manual_seed(3))
    assert one == generate(model, b"abc", 20, top_k=5, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_kv_cache_matches_the_full_forward_and_greedy_decoding_byte_for_byte(positional):
    model = tiny(positional)
    x = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(2))
    logits, cache = model.cached(x[:, :5], None)
    steps = [logits]
    for t in range(5, 12):
        out, cache = model.cached(x[:, t : t + 1], cache)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), model(x), rtol=0, atol=1e-12)
    # 30 bytes after a 4-byte prompt run past the 12-byte context: the window slides in both.
    assert generate(model, b"abcd", 30, temperature=0) == generate(model, b"abcd", 30, temperature=0, use_cache=False)
    sampled = [
        generate(model, b"ab", 8, top_k=4, generator=torch.Generator().manual_seed(5), use_cache=c)
        for c in (True, False)
    ]
    assert sampled[0] == sampled[1]


@pytest.mark.parametrize("positional", ["learned", "rotary"])
def test_an_empty_batch_runs(positional):
    # A rank's share of the last validation batch can be empty; the model must still run.
    assert tiny(positional)(torch.zeros(0, 12, dtype=torch.long)).shape == (0, 12, 256)
