import pytest
import torch

from hf_xfmr.layers.dropout import Dropout, dropout, keep_bool, keep_mask, random_draws


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_keep_rate_and_scaling_match_the_bernoulli_definition(p):
    torch.manual_seed(0)
    x = torch.ones(1_000_000)
    y = dropout(x, p, training=True)
    kept = y != 0
    # 1e6 draws: the kept fraction is within 5 standard deviations of 1 - p.
    std = (p * (1 - p) / x.numel()) ** 0.5
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * std
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)))


@pytest.mark.parametrize("size", [64, 256])  # F.dropout below 2^14 elements, ours above
def test_gradient_uses_the_same_mask_and_scale(size):
    torch.manual_seed(0)
    x = torch.randn(size, size, requires_grad=True)
    y = dropout(x, 0.3, training=True)
    y.backward(torch.ones_like(y))
    kept = y.detach() != 0
    assert torch.equal(x.grad != 0, kept)
    assert torch.allclose(x.grad[kept], torch.full_like(x.grad[kept], 1 / 0.7))


@pytest.mark.parametrize("size", [32, 256])
def test_seeded_reproducible_and_identity_when_inactive(size):
    x = torch.randn(size, size)
    torch.manual_seed(3)
    a = dropout(x, 0.2)
    torch.manual_seed(3)
    b = dropout(x, 0.2)
    assert torch.equal(a, b)
    assert not torch.equal(dropout(x, 0.2), a)
    assert dropout(x, 0.2, training=False) is x
    assert dropout(x, 0.0) is x
    module = Dropout(0.2).eval()
    assert module(x) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))


def test_float_mask_bool_mask_and_dropout_come_from_the_same_draws():
    torch.manual_seed(5)
    mask = keep_mask((300, 301), 0.25)  # odd element count: half of the last 64-bit word is unused
    torch.manual_seed(5)
    keep = keep_bool((300, 301), 0.25)
    assert mask.dtype == torch.float32 and keep.dtype == torch.bool
    assert torch.equal(mask != 0, keep)
    assert torch.equal(mask[keep], torch.full_like(mask[keep], 1 / 0.75))
    x = torch.randn(300, 301)
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.25), x * mask)


def test_dropout_keeps_one_byte_per_element_for_backward():
    x = torch.randn(256, 256, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        dropout(x, 0.3)
    assert [t.element_size() for t in saved] == [1]


def test_draws_are_uniform_31_bit_integers():
    torch.manual_seed(0)
    draws = random_draws((1_000_000,)).double()
    assert draws.min() >= 0 and draws.max() < 2**31
    # mean and the fraction in each eighth of the range, within 5 standard deviations
    assert abs(draws.mean().item() / 2**31 - 0.5) < 5 * (1 / 12 / 1e6) ** 0.5
    eighths = torch.bincount((draws / 2**28).long(), minlength=8).double() / 1e6
    assert (eighths - 0.125).abs().max() < 5 * (0.125 * 0.875 / 1e6) ** 0.5
    torch.manual_seed(0)
    assert torch.equal(random_draws((1_000_000,)).double(), draws)
    assert not torch.equal(random_draws((1_000_000,)).double(), draws)  # the generator moved on
    small = random_draws((1000,))  # below 2^16 elements: torch's own generator, the same range
    assert small.dtype == torch.int32 and small.min() >= 0 and small.float().mean() > 2**29


def test_other_dtypes_keep_their_dtype_and_mask():
    for dtype in (torch.float64, torch.bfloat16):
        x = torch.randn(256, 256, dtype=dtype, requires_grad=True)
        y = dropout(x, 0.3)
        assert y.dtype == dtype
        y.backward(torch.ones_like(y))
        assert x.grad.dtype == dtype
        assert torch.equal(x.grad != 0, y.detach() != 0)  # randn: no exact zeros


def test_a_rate_too_small_to_resolve_drops_nothing():
    x = torch.randn(100_000)
    assert torch.equal(dropout(x, 1e-12), x * (1 / (1 - 1e-12)))
    assert torch.equal(keep_mask((1000,), 1e-12), torch.full((1000,), 1 / (1 - 1e-12)))
    assert keep_bool((100_000,), 1e-12).all()
