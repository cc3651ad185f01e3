"""Fused dropout kernels: the same outputs and gradients as the unfused autograd graph with the same keep
mask, the dropout rate right, and only the promised tensors saved for backward."""

import pytest
import torch
from torch.testing import assert_close

from hf_xfmr.layers.dropout import keep_bool
from hf_xfmr.layers.fused_dropout import attention_with_dropout, relu_dropout


def _same_keep(shape, p, seed):
    torch.manual_seed(seed)
    return keep_bool(shape, p)


@pytest.mark.parametrize("mask_kind", ["bias-shared", "bias-per-row", "bool", "none"])
@pytest.mark.parametrize("scaling", [1.0, 0.25])
def test_attention_with_dropout_equals_the_unfused_graph(mask_kind, scaling):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, requires_grad=True) for _ in range(3))
    mask = None
    if mask_kind == "bias-shared":
        mask = torch.randn(1, 3, 5, 5, generator=g).masked_fill(torch.ones(5, 5).triu(1).bool(), -3.4e38)
        mask.requires_grad_()
    elif mask_kind == "bias-per-row":
        mask = torch.randn(2, 3, 5, 5, generator=g, requires_grad=True)
    elif mask_kind == "bool":
        mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
        mask[1, ..., 3:] = False
    p, weights = 0.3, torch.randn(2, 5, 3, 4, generator=g)
    torch.manual_seed(11)
    out = attention_with_dropout(q, k, v, mask, scaling, p)
    (out * weights).sum().backward()
    fused = [t.grad.clone() for t in (q, k, v)] + ([mask.grad.clone()] if mask is not None and mask.requires_grad
                                                   else [])
    for t in (q, k, v, mask):
        if t is not None and t.grad is not None:
            t.grad = None
    scores = q @ k.transpose(-1, -2) * scaling
    if mask is not None:
        scores = scores.masked_fill(~mask, -3.4e38) if mask.dtype == torch.bool else scores + mask
    keep = _same_keep(scores.shape, p, 11)
    expected = (torch.where(keep, scores.softmax(-1), 0.0) / (1 - p)) @ v
    assert_close(out, expected.transpose(1, 2), atol=1e-6, rtol=1e-6)
    (expected.transpose(1, 2) * weights).sum().backward()
    unfused = [t.grad for t in (q, k, v)] + ([mask.grad] if mask is not None and mask.requires_grad else [])
    for a, b in zip(fused, unfused, strict=True):
        assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_relu_dropout_equals_relu_then_dropout_and_drops_at_rate_p():
    x = torch.randn(64, 300, requires_grad=True)
    torch.manual_seed(3)
    out = relu_dropout(x, 0.1)
    out.sum().backward()
    keep = _same_keep(x.shape, 0.1, 3)
    expected = torch.where(keep, x.detach().relu(), 0.0) / 0.9
    assert_close(out, expected)
    assert_close(x.grad, ((x.detach() > 0) & keep).float() / 0.9)
    positive = x.detach() > 0
    dropped = (out.detach()[positive] == 0).float().mean().item()
    assert 0.08 < dropped < 0.12
    assert torch.equal(relu_dropout(x, 0.1, training=False), x.relu())


def test_attention_saves_probabilities_and_dropped_probabilities_only():
    q, k, v = (torch.randn(2, 3, 50, 8, requires_grad=True) for _ in range(3))
    saved = []

    def pack(t):
        saved.append(t)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attention_with_dropout(q, k, v, None, 1.0, 0.1)
    big = [t for t in saved if t.shape[-2:] == (50, 50)]
    # probs (softmax backward) and probs * mask (matmul backward); no separate mask, no scores
    assert sorted(str(t.dtype) for t in big) == ["torch.float32", "torch.float32"]
