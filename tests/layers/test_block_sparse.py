"""BigBird block-sparse attention: the kernel against a dense L x L reference built from the same block pattern,
the random-block patterns against transformers' own draws, and the kernel against transformers' sparse module."""

import logging

import numpy as np
import pytest
import torch
from torch.testing import assert_close
from transformers import BigBirdConfig
from transformers.models.big_bird.modeling_big_bird import BigBirdBlockSparseAttention, BigBirdModel

from hf_xfmr.layers import block_sparse
from hf_xfmr.layers.block_sparse import (
    band_block_indices,
    block_sparse_attention,
    fresh_random_block_pattern,
    log_full_attention_once,
    random_block_pattern,
    uses_full_attention,
)


def dense_block_sparse(q, k, v, keep, block_size, random_blocks):
    """The same attention as one dense softmax over an L x L multiplicity matrix (test only): entry (i, j) counts
    how many of query i's key slots hold key j (2 where a random block repeats a window or global block)."""
    batch, heads, seq_len, dim = q.shape
    n = seq_len // block_size
    counts = torch.zeros(batch, heads, n, n)  # block-level multiplicities
    counts[:, :, 0] = 1
    counts[:, :, -1] = 1
    index = band_block_indices(random_blocks, n).expand(batch, heads, -1, -1)  # (B, H, n-2, 5 + r)
    for row in range(1, n - 1):
        slots = index[:, :, row - 1].clone()  # (B, H, 5 + r)
        ones = torch.ones(slots.shape)
        if row == 1:
            ones[..., 1] = 0  # window block 0 is the global block already
        if row == n - 2:
            ones[..., -1] = 0  # global block n-1 is in the window already
        counts[:, :, row].scatter_add_(-1, slots, ones)
    counts = counts.repeat_interleave(block_size, 2).repeat_interleave(block_size, 3)  # (B, H, L, L)
    if keep is not None:
        counts = counts * keep[:, None, None, :]
    scores = q @ k.transpose(-1, -2) * dim ** -0.5 + counts.log()  # log(0) = -inf hides a key
    out = scores.softmax(-1) @ v  # (B, H, L, D)
    if keep is not None:
        out = out * keep[:, None, :, None]
    return out.transpose(1, 2)


def _inputs(seed, batch=2, heads=3, seq_len=128, dim=8):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, seq_len, dim, generator=g, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("pattern", ["fresh", "fresh-per-row", "eval-zeros", "reference-train"])
@pytest.mark.parametrize("padded", [False, True])
def test_kernel_equals_dense_reference(pattern, padded):
    block, heads, seq_len, r = 8, 3, 128, 2  # n = 16 blocks
    q, k, v = _inputs(1, heads=heads, seq_len=seq_len)
    n = seq_len // block
    if pattern == "fresh":
        blocks = fresh_random_block_pattern(n, r, heads, generator=torch.Generator().manual_seed(3))
    elif pattern == "fresh-per-row":
        blocks = fresh_random_block_pattern(n, r, heads, batch_size=2, generator=torch.Generator().manual_seed(3))
    else:
        blocks = random_block_pattern(seq_len, block, r, heads, seed=4, training=pattern == "reference-train")
    keep = None
    if padded:
        keep = torch.ones(2, seq_len)
        keep[0, 77:] = 0  # ends inside a block
        keep[1, 120:] = 0  # the last block is half padding
    out = block_sparse_attention(q, k, v, keep, block, blocks)
    want = dense_block_sparse(q, k, v, keep, block, blocks)
    assert out.shape == (2, seq_len, heads, 8)
    assert_close(out, want, atol=1e-6, rtol=1e-5)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    expected = torch.autograd.grad(want, (q, k, v), grad)
    for a, b in zip(got, expected):
        assert_close(a, b, atol=1e-5, rtol=1e-5)  # the fused kernel sums in another order: ~1e-6


@pytest.mark.parametrize("pattern", ["fresh-per-row", "reference-train"])
def test_skipping_padding_blocks_gives_the_same_outputs_and_gradients(pattern, monkeypatch):
    """Rows ending in the first half, inside the last block, and a full row: the query blocks without a real token
    (the last, global, one of short rows included) are not computed, and nothing else changes."""
    block, heads, seq_len, r = 8, 3, 128, 2
    q, k, v = _inputs(2, batch=4, heads=heads, seq_len=seq_len)
    n = seq_len // block
    if pattern == "fresh-per-row":
        blocks = fresh_random_block_pattern(n, r, heads, batch_size=4, generator=torch.Generator().manual_seed(5))
    else:
        blocks = random_block_pattern(seq_len, block, r, heads, seed=6, training=True)
    keep = torch.zeros(4, seq_len, dtype=torch.bool)
    for row, length in enumerate((19, 64, 125, 128)):
        keep[row, :length] = True
    computed = []  # query blocks per attention call
    attend = block_sparse._attend
    monkeypatch.setattr(block_sparse, "_attend", lambda query, *args: computed.append(
        query.shape[0] * query.shape[2] // block) or attend(query, *args))
    out = block_sparse_attention(q, k, v, keep, block, blocks, skip_padding_blocks=True)
    # 4 first blocks, the last blocks of the rows reaching it (2), middle blocks 1-2, 1-7, 1-14, 1-14.
    assert computed == [4, 2, 2 + 7 + 14 + 14]
    want = dense_block_sparse(q, k, v, keep.float(), block, blocks)
    assert_close(out, block_sparse_attention(q, k, v, keep, block, blocks), atol=1e-6, rtol=1e-5)
    assert_close(out, want, atol=1e-6, rtol=1e-5)
    assert not out[~keep].any()
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), grad)
    expected = torch.autograd.grad(want, (q, k, v), grad)
    for a, b in zip(got, expected):
        assert_close(a, b, atol=1e-5, rtol=1e-5)  # the fused kernel sums in another order: ~1e-6


def test_fresh_pattern_is_legal_distinct_and_changes():
    n, r, heads = 12, 3, 4
    g = torch.Generator().manual_seed(0)
    first = fresh_random_block_pattern(n, r, heads, generator=g)
    second = fresh_random_block_pattern(n, r, heads, generator=g)
    assert first.shape == (heads, n - 2, r) and not torch.equal(first, second)
    for pattern in (first, second):
        rows = torch.arange(1, n - 1)[None, :, None]
        assert ((pattern - rows).abs() > 1).all()  # outside the window
        assert ((pattern > 0) & (pattern < n - 1)).all()  # not a global block
        assert all(len(set(row.tolist())) == r for row in pattern.flatten(0, 1))  # distinct
    with pytest.raises(ValueError, match="legal random blocks"):
        fresh_random_block_pattern(7, 3, heads)


def _reference_module(heads, block, r, max_len, seed, training):
    config = BigBirdConfig(hidden_size=8 * heads, num_attention_heads=heads, block_size=block,
                           num_random_blocks=r, max_position_embeddings=max_len)
    module = BigBirdBlockSparseAttention(config, seed=seed)
    return module.train(training)


@pytest.mark.parametrize("seq_len,block,r,max_len", [(176, 8, 3, 512), (160, 16, 1, 256), (1024, 64, 3, 4096),
                                                     (1024, 32, 2, 1024), (3072, 64, 3, 4096)])
@pytest.mark.parametrize("training", [True, False])
def test_pattern_equals_the_reference_draws(seq_len, block, r, max_len, training):
    heads, seed = 3, 5
    module = _reference_module(heads, block, r, max_len, seed, training)
    np.random.seed(seed)  # what the reference does on each training forward
    if seq_len in (1024, 3072, 4096):
        want = [module._bigbird_block_rand_mask(max_len, max_len, block, block, r, last_idx=1024)[:seq_len // block - 2]
                for _ in range(heads)]
    else:
        plan, plan_r = module._get_rand_attn_plan(seq_len, block, r)
        want = module._bigbird_block_rand_mask_with_head(seq_len, seq_len, block, block, heads, plan, plan_r)
    before = np.random.get_state()[1].copy()
    got = random_block_pattern(seq_len, block, r, heads, seed=seed, training=training, max_seq_len=max_len)
    assert np.array_equal(np.random.get_state()[1], before)  # numpy's global generator is left alone
    assert_close(got, torch.tensor(np.stack(want), dtype=torch.long), atol=0, rtol=0)


@pytest.mark.parametrize("seq_len,block,r", [(192, 16, 3), (1024, 64, 2)])
@pytest.mark.parametrize("training", [True, False])
def test_kernel_equals_transformers_sparse_module(seq_len, block, r, training):
    heads, seed = 2, 1
    torch.manual_seed(0)
    module = _reference_module(heads, block, r, 4096, seed, training)
    hidden = torch.randn(2, seq_len, 8 * heads)
    mask = torch.ones(2, seq_len)
    mask[1, seq_len - 3 * block - 5:] = 0
    blocked, band, from_mask, to_mask = BigBirdModel.create_masks_for_block_sparse_attn(mask, block)
    want, _ = module(hidden, band, from_mask, to_mask, blocked, blocked)
    q, k, v = (proj(hidden).view(2, seq_len, heads, 8).transpose(1, 2) for proj in
               (module.query, module.key, module.value))
    blocks = random_block_pattern(seq_len, block, r, heads, seed=seed, training=training, max_seq_len=4096)
    got = block_sparse_attention(q, k, v, mask, block, blocks).reshape(2, seq_len, -1)
    assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_bad_inputs_are_refused():
    q, k, v = _inputs(0, seq_len=40)
    blocks = torch.zeros(3, 3, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="multiple of block_size"):
        block_sparse_attention(q, k, v, None, 16, blocks)
    with pytest.raises(ValueError, match="at least 5 blocks"):
        block_sparse_attention(q, k, v, None, 10, blocks)
    with pytest.raises(ValueError, match=r"random_blocks must be \(H=3, n-2=3"):
        block_sparse_attention(q, k, v, None, 8, torch.zeros(2, 3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="take full attention"):
        random_block_pattern(64, 8, 2, 3)


def test_full_attention_rule_and_single_log(caplog):
    assert uses_full_attention(704, 64, 3) and not uses_full_attention(705, 64, 3)
    assert uses_full_attention(56, 8, 1) and not uses_full_attention(57, 8, 1)
    with caplog.at_level(logging.WARNING, logger="hf_xfmr.layers.block_sparse"):
        for length in (40, 50, 60):
            log_full_attention_once(length, 7, 9)  # a layout no other test uses
    assert [rec.getMessage().count("runs full attention") for rec in caplog.records] == [1]
