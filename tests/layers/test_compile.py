"""The layers with hand-written CPU paths trace under `torch.compile(fullgraph=True)`.

The CPU dropout samplers (`random_()` on an int32 buffer, inside autograd Functions) and XLNet's strided
relative shift cannot be traced by dynamo; compiled, they must switch to plain ops with the same
definition. Tiny inputs: each test compiles one small function.
"""

import pytest
import torch
from torch.testing import assert_close

from hf_xfmr.layers.dropout import dropout
from hf_xfmr.layers.fused_dropout import attention_with_dropout, relu_dropout
from hf_xfmr.layers.relative_xl import rel_shift


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _kept_rate_and_scale(y, x, p):
    kept = y != 0
    std = (p * (1 - p) / x.numel()) ** 0.5
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * std  # 5 standard deviations of Bernoulli(1 - p)
    assert_close(y[kept], x[kept] / (1 - p))
    return kept


@pytest.mark.parametrize("fn", ["dropout", "relu_dropout"])
def test_dropout_compiles_with_the_same_distribution(fn):
    p = 0.3
    op = dropout if fn == "dropout" else relu_dropout
    compiled = torch.compile(lambda t: op(t, p, training=True), fullgraph=True)
    torch.manual_seed(0)
    x = torch.rand(200_000) + 0.5  # positive: relu keeps every value, only dropout zeroes
    x.requires_grad_(True)
    y = compiled(x)
    kept = _kept_rate_and_scale(y.detach(), x.detach(), p)
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)  # the gradient uses the same mask


def test_attention_with_dropout_compiles():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[1, :, :, 3:] = False
    compiled = torch.compile(lambda *a: attention_with_dropout(*a, scaling=0.5, p=0.5), fullgraph=True)
    out = compiled(q, k, v, mask)  # (B, Tq, H, D)
    assert out.shape == (2, 5, 2, 4) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    # Without dropout the compiled path is exactly softmax attention: check it against the definition.
    plain = torch.compile(lambda *a: attention_with_dropout(*a, scaling=0.5, p=1e-9), fullgraph=True)
    scores = (q @ k.transpose(-1, -2) * 0.5).masked_fill(~mask, torch.finfo(q.dtype).min)
    expected = (scores.softmax(-1) @ v).transpose(1, 2)
    assert_close(plain(q, k, v, mask), expected)


def test_rel_shift_compiles_and_is_a_view():
    scores = torch.randn(2, 3, 4, 9)  # (B, H, L, J): L = 4 queries, J = K + L with K = 5 keys
    eager = rel_shift(scores, 5)
    assert eager.data_ptr() == scores.data_ptr() + 4 * scores.element_size()  # a view from offset L
    for i in range(4):
        for j in range(5):
            assert torch.equal(eager[..., i, j], scores[..., i, j + 4 - i])
    assert_close(torch.compile(rel_shift, fullgraph=True)(scores, 5), eager)
