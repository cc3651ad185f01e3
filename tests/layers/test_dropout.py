import pytest
import torch

from hf_xfmr.layers.dropout import Dropout, dropout


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


def test_gradient_uses_the_same_mask_and_scale():
    torch.manual_seed(0)
    x = torch.randn(64, 64, requires_grad=True)
    y = dropout(x, 0.3, training=True)
    y.backward(torch.ones_like(y))
    kept = y.detach() != 0
    assert torch.equal(x.grad != 0, kept)
    assert torch.allclose(x.grad[kept], torch.full_like(x.grad[kept], 1 / 0.7))


def test_seeded_reproducible_and_identity_when_inactive():
    x = torch.randn(32, 32)
    torch.manual_seed(3)
    a = dropout(x, 0.2)
    torch.manual_seed(3)
    b = dropout(x, 0.2)
    assert torch.equal(a, b)
    assert dropout(x, 0.2, training=False) is x
    assert dropout(x, 0.0) is x
    module = Dropout(0.2).eval()
    assert module(x) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
