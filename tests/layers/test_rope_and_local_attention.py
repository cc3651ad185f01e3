"""RoPE, window-blocked local attention, per-document varlen attention and the varlen batch description."""

import math

import pytest
import torch
from torch.testing import assert_close

from hf_xfmr.layers.attention import (
    eager_attention_forward,
    local_attention,
    sdpa_attention_forward,
    varlen_attention,
    varlen_attention_reference,
)
from hf_xfmr.layers.masks import sliding_window_mask
from hf_xfmr.layers.padding import varlen_batch
from hf_xfmr.layers.rope import apply_rope, rope_cos_sin, rope_inv_freq, rotate_half

KERNELS = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}


def test_rope_by_hand():
    inv = rope_inv_freq(4, 100.0)
    assert_close(inv, torch.tensor([1.0, 0.1]))
    cos, sin = rope_cos_sin(torch.tensor([2]), inv)
    assert_close(cos, torch.tensor([[math.cos(2), math.cos(0.2), math.cos(2), math.cos(0.2)]]))
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert_close(rotate_half(x), torch.tensor([[-3.0, -4.0, 1.0, 2.0]]))
    # pair (x0, x2) rotated by angle 2, pair (x1, x3) by angle 0.2
    out = apply_rope(x, cos, sin)
    c, s = math.cos(2), math.sin(2)
    assert_close(out[0, [0, 2]], torch.tensor([1 * c - 3 * s, 3 * c + 1 * s]))
    with pytest.raises(ValueError, match="even head size"):
        rope_inv_freq(3, 10.0)


def test_rope_scores_depend_only_on_relative_position():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, generator=g)
    inv = rope_inv_freq(8, 10000.0)

    def score(i, j):
        (cq, sq), (ck, sk) = rope_cos_sin(torch.tensor(i), inv), rope_cos_sin(torch.tensor(j), inv)
        return (apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum()

    assert_close(score(3, 1), score(10, 8), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("seq_len,window", [(1, 8), (5, 8), (9, 16), (64, 8), (37, 8), (100, 30), (33, 2)])
def test_local_attention_equals_a_dense_sliding_window_mask(kernel, seq_len, window):
    g = torch.Generator().manual_seed(seq_len)
    q, k, v = (torch.randn(2, 3, seq_len, 4, generator=g, requires_grad=True) for _ in range(3))
    fn = KERNELS[kernel]
    out = local_attention(None, fn, q, k, v, window)
    dense, _ = fn(None, q, k, v, sliding_window_mask(seq_len, window)[None, None])
    assert out.shape == (2, seq_len, 3, 4)
    assert_close(out, dense, atol=1e-6, rtol=0)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    dense_grads = torch.autograd.grad(dense.square().sum(), (q, k, v))
    for a, b in zip(grads, dense_grads):
        assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("window", [None, 6])
@pytest.mark.parametrize("bounds", [[0, 5, 12, 12, 30], [0, 10, 20, 30], [0, 30]])
def test_varlen_attention_equals_the_block_diagonal_reference(kernel, window, bounds):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(30, 2, 4, generator=g) for _ in range(3))
    out = varlen_attention(None, KERNELS[kernel], q, k, v, bounds, window=window)
    ref = varlen_attention_reference(q, k, v, torch.tensor(bounds), window=window)
    assert_close(out, ref, atol=1e-6, rtol=0)


def test_varlen_batch_describes_padded_and_packed_batches():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    vb = varlen_batch(mask, 2, 4)
    assert vb.indices.tolist() == [0, 1, 2, 4, 5]
    assert vb.bounds == [0, 3, 5] and vb.cu_seqlens.dtype == torch.int32 and vb.max_seqlen == 3
    full = varlen_batch(None, 2, 4)
    assert full.indices is None and full.bounds == [0, 4, 8]
    packed = varlen_batch(mask, 2, 4, cu_seqlens=torch.tensor([0, 1, 3, 5]))
    assert packed.bounds == [0, 1, 3, 5] and packed.max_seqlen == 2
    with pytest.raises(ValueError, match="row 1 has no real token"):
        varlen_batch(torch.tensor([[1, 0], [0, 0]]), 2, 2)
    with pytest.raises(ValueError, match="number of real tokens, 5"):
        varlen_batch(mask, 2, 4, cu_seqlens=torch.tensor([0, 3, 6]))
    with pytest.raises(ValueError, match="across a row boundary"):
        varlen_batch(mask, 2, 4, cu_seqlens=torch.tensor([0, 2, 5]))
