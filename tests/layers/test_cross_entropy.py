"""linear_cross_entropy equals the naive linear + cross-entropy in value and gradients, chunk by chunk."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from hf_xfmr.layers.cross_entropy import linear_cross_entropy


def _inputs(n=37, c=16, v=53, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, c, generator=g, requires_grad=True)
    weight = torch.randn(v, c, generator=g, requires_grad=True)
    b = torch.randn(v, generator=g, requires_grad=True) if bias else None
    labels = torch.randint(0, v, (n,), generator=g)
    labels[::4] = -100
    return hidden, weight, b, labels


def _naive(hidden, weight, bias, labels):
    return F.cross_entropy(F.linear(hidden, weight, bias).float(), labels, reduction="sum")


@pytest.mark.parametrize("chunk_size", [None, 1, 5, 37, 100])
@pytest.mark.parametrize("bias", [True, False])
def test_value_and_gradients_match_the_naive_computation(chunk_size, bias):
    hidden, weight, b, labels = _inputs(bias=bias)
    params = [t for t in (hidden, weight, b) if t is not None]
    expected = _naive(hidden, weight, b, labels)
    expected_grads = torch.autograd.grad(expected * 0.7, params)
    got = linear_cross_entropy(hidden, weight, b, labels, chunk_size=chunk_size)
    got_grads = torch.autograd.grad(got * 0.7, params)  # the incoming gradient scales every grad
    assert_close(got, expected, atol=1e-4, rtol=1e-6)
    for a, e in zip(got_grads, expected_grads):
        assert_close(a, e, atol=1e-5, rtol=1e-5)


def test_every_row_ignored_gives_zero_and_zero_gradients():
    hidden, weight, b, labels = _inputs()
    loss = linear_cross_entropy(hidden, weight, b, torch.full_like(labels, -100), chunk_size=8)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.count_nonzero(hidden.grad) == 0 and torch.count_nonzero(weight.grad) == 0


def test_no_grad_and_batched_shapes():
    hidden, weight, b, labels = _inputs(n=24)
    with torch.no_grad():
        value = linear_cross_entropy(hidden.view(4, 6, -1), weight, b, labels.view(4, 6), chunk_size=7)
    assert_close(value, _naive(hidden, weight, b, labels).detach(), atol=1e-4, rtol=1e-6)
    with pytest.raises(ValueError, match="rows but labels has"):
        linear_cross_entropy(hidden, weight, b, labels[:5])


def test_bf16_autocast_tracks_fp32():
    hidden, weight, b, labels = _inputs(n=64, c=32, v=101)
    expected = _naive(hidden, weight, b, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = linear_cross_entropy(hidden, weight, b, labels, chunk_size=16)
    assert got.dtype == torch.float32
    assert_close(got, expected, atol=0.5, rtol=0.02)
    got.backward()
    assert hidden.grad.dtype == torch.float32 and torch.isfinite(weight.grad).all()
