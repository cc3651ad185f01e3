"""Transformer-XL / XLNet relative attention: sinusoidal relative positions, the relative shift, the
relative segment bias, and XLNet's permutation masks built from compact inputs.

Papers: Dai et al. 2019, "Transformer-XL" (https://arxiv.org/abs/1901.02860, sec. 3.3: relative
positional encodings with the biases u = r_w_bias and v = r_r_bias); Yang et al. 2019, "XLNet"
(https://arxiv.org/abs/1906.08237, sec. 2.3 two-stream attention, 2.5 relative segment encodings).

Conventions: a query row i sits at absolute key index `mlen + pos_i` (mems first, then the current
segment); keys are indexed 0..K-1 (K = mlen + L). The relative-position table has J = K + L rows for
distances K, K-1, ..., -L+1 ("bi") or K + 1 rows for K..0 ("uni"), so that the score of query i and key
j reads column `p = L - pos_i + j` of `q_i . R^T`.

Shapes: B batch, H heads, R query rows, L segment length, K keys (mems + segment), J table rows, D head size.
"""

import torch

from .dropout import dropout


def relative_distances(qlen: int, klen: int, attn_type: str, clamp_len: int | None, device=None) -> torch.Tensor:
    """(J,) float distances klen, klen-1, ... down to -qlen+1 ("bi") or 1 ("uni"), clamped to +-clamp_len."""
    end = -qlen if attn_type == "bi" else -1
    dist = torch.arange(klen, end, -1, device=device, dtype=torch.int64).float()  # (J,)
    if clamp_len is not None and clamp_len > 0:
        dist = dist.clamp(-clamp_len, clamp_len)
    return dist


def sinusoid_table(distances: torch.Tensor, d_model: int) -> torch.Tensor:
    """(J,) distances -> (J, C) [sin(d / 10000^(2k/C)), cos(...)] (Vaswani et al. 2017, sec. 3.5)."""
    inv_freq = 1.0 / torch.pow(10000, torch.arange(0, d_model, 2, device=distances.device).float() / d_model)
    angles = distances[:, None] * inv_freq[None, :]  # (J, C/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # (J, C)


def rel_shift(scores: torch.Tensor, klen: int) -> torch.Tensor:
    """(..., L, J) position scores of the L segment rows -> (..., L, K): out[i, j] = scores[i, j + L - i].

    A view, no copy: element (i, j) lives at offset i*J + j + L - i = L + i*(J-1) + j of each (L, J)
    matrix, so the shifted matrix is the flat matrix from offset L read as L rows of J - 1 (what
    Transformer-XL's pad-and-reshape trick computes by copying the whole tensor twice). Built from
    reshape and slices (no `as_strided` / `storage_offset`), so `torch.compile(fullgraph=True)` traces it.
    """
    *lead, qlen, width = scores.shape
    flat = scores.reshape(*lead, qlen * width)[..., qlen:]  # (..., L*(J-1)): from offset L to the end
    return flat.reshape(*lead, qlen, width - 1)[..., :klen]  # (..., L, K)


def rel_gather(scores: torch.Tensor, positions: torch.Tensor, qlen: int, klen: int) -> torch.Tensor:
    """(B, H, R, J) position scores of R query rows at segment `positions` (B, R) -> (B, H, R, K):
    out[b, h, r, j] = scores[b, h, r, j + qlen - positions[b, r]] (the shift for arbitrary rows)."""
    batch, heads, rows, width = scores.shape
    index = qlen - positions[:, None, :, None] + torch.arange(klen, device=scores.device)  # (B, 1, R, K)
    if width < qlen + klen:  # "uni" tables stop at distance 0: future keys (masked anyway) read the last column
        index = index.clamp(max=width - 1)
    return scores.gather(-1, index.expand(batch, heads, rows, klen))


def segment_bias(q_s: torch.Tensor, seg_embed: torch.Tensor, query_types: torch.Tensor,
                 key_types: torch.Tensor) -> torch.Tensor:
    """XLNet's relative segment term (sec. 2.5): (B, H, R, K) = (q_i + b) . s_ij, with s_ij = seg_embed[0]
    when i and j are in the same segment and seg_embed[1] otherwise (the plain form, for reference/tests).

    q_s: (B, H, R, D) queries plus r_s_bias; seg_embed (2, H, D); query_types (B, R); key_types (B, K).
    """
    both = torch.einsum("bhrd,shd->bhrs", q_s, seg_embed)  # (B, H, R, 2)
    differ = (query_types[:, :, None] != key_types[:, None, :])[:, None]  # (B, 1, R, K)
    return torch.where(differ, both[..., 1:2], both[..., 0:1])


def segment_query_features(q_s: torch.Tensor, seg_embed: torch.Tensor, query_types: torch.Tensor,
                           num_types: int) -> torch.Tensor:
    """The segment term as a dot product, for folding it into the q.k matmul: (B, H, R, S) features a_i with
    a_i . onehot(key_type_j) = segment_bias[i, j] - (a per-row constant), which softmax ignores.

    segment_bias[i, j] = e0_i + (e1_i - e0_i) [t_i != t_j] = e1_i - (e1_i - e0_i) [t_i == t_j], and
    [t_i == t_j] = onehot(t_i) . onehot(t_j); dropping the row constant e1_i leaves
    a_i = -(e1_i - e0_i) onehot(t_i). Keys get onehot(t_j) (`num_types` = S columns) appended.
    """
    both = torch.einsum("bhrd,shd->bhrs", q_s, seg_embed)  # (B, H, R, 2)
    gap = both[..., 1] - both[..., 0]  # (B, H, R)
    onehot = torch.nn.functional.one_hot(query_types, num_types).to(q_s.dtype)[:, None]  # (B, 1, R, S)
    return -gap[..., None] * onehot  # (B, H, R, S)


def permutation_hidden(key_ranks: torch.Tensor, query_ranks: torch.Tensor) -> torch.Tensor:
    """XLNet's factorization-order mask from compact ranks: (B, R, L) bool, True = may not attend.

    key_ranks (B, L): -1 for tokens every position may see (non-targets), k >= 0 for the target that is
    k-th in the factorization order. query_ranks (B, R): the ranks of the query rows. A non-target
    query sees only non-targets; a target of rank k sees the non-targets and the targets of rank < k
    (never itself: the content stream adds its own position back).
    """
    return key_ranks[:, None, :] >= query_ranks.clamp(min=0)[:, :, None]


def causal_hidden(query_index: torch.Tensor, klen: int, mlen: int, same_length: bool) -> torch.Tensor:
    """Transformer-XL's causal mask for queries at segment positions `query_index` (..., R) -> (..., R, K)
    bool: key j is hidden when it is in the future (j > mlen + i); with `same_length` also when j < i,
    so every query sees the same number of keys."""
    keys = torch.arange(klen, device=query_index.device)
    hidden = keys > (query_index[..., None] + mlen)
    if same_length:
        hidden = hidden | (keys < query_index[..., None])
    return hidden


def additive_mask(hidden: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """Bool mask (True = masked) -> additive (0 / -1e30; -65500 in float16), as XLNet subtracts it: a masked
    score still passes its gradient through, and a fully masked row averages all keys instead of giving NaN."""
    if hidden is None:
        return None
    big = -65500.0 if dtype == torch.float16 else -1e30
    return torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill_(hidden, big)


def relative_attention(q, k, v, k_r, r_w_bias, r_r_bias, mask=None, seg=None, positions=None, *, qlen: int,
                       scale: float, dropout_p: float = 0.0, kernel=None, module=None, return_weights: bool = False):
    """Two-term relative attention (+ segment term): softmax(((q+u) k^T + shift((q+v) R^T) + ef) * scale) v.

    q (B, H, R, D); k, v (B, H, K, D); k_r (G, H, J, D), G in {1, 2, B}: the projected relative table,
    shared by groups of B / G rows (2 groups with bi_data). r_w_bias, r_r_bias (H, D). mask (B, R, K)
    additive float from `additive_mask`, or None. seg: a callable q -> (query features (B, H, R, S), key
    one-hots (B, 1, K, S)) whose product is the segment term up to a per-row constant
    (`segment_query_features`): both are appended to q and k, so the term costs S extra matmul columns.
    positions (B, R): segment positions of the query rows; None = the R = L segment rows in order.
    kernel: a padded attention kernel with the attention-interface signature (e.g. `attention.
    sdpa_unchecked_forward`), called as kernel(module, q, k, v, scaled bias + mask, scaling=scale, dropout)
    with the relative terms as its mask; None: the scores written out in the reference's order (the one
    form that returns the weights).
    Returns (out (B, H, R, D), weights (B, H, R, K) or None).
    """
    batch, heads, rows, head_dim = q.shape
    klen = k.shape[-2]
    groups = k_r.shape[0]
    q_r = (q + r_r_bias[:, None]).view(groups, batch // groups, heads, rows, head_dim)
    pos_scores = torch.matmul(q_r, k_r.transpose(-1, -2)[:, None]).view(batch, heads, rows, -1)  # (B, H, R, J)
    if positions is None:
        bias = rel_shift(pos_scores, klen)  # (B, H, L, K)
    else:
        bias = rel_gather(pos_scores, positions, qlen, klen)  # (B, H, R, K)
    q_w = q + r_w_bias[:, None]
    if seg is not None:
        features, key_onehot = seg(q)
        q_w = torch.cat([q_w, features], dim=-1)  # (B, H, R, D + S)
        k = torch.cat([k, key_onehot.to(k.dtype).expand(batch, heads, klen, -1)], dim=-1)  # (B, H, K, D + S)
    if kernel is not None and not return_weights:
        bias = bias * scale
        if mask is not None:
            bias = bias + mask[:, None]
        out, _ = kernel(module, q_w, k, v, bias, scaling=scale, dropout=dropout_p)  # (B, R, H, D)
        return out.transpose(1, 2), None  # (B, H, R, D)
    scores = torch.matmul(q_w, k.transpose(-1, -2)).add_(bias).mul_(scale)  # (B, H, R, K)
    if mask is not None:
        scores = scores.add_(mask[:, None])
    weights = scores.softmax(dim=-1)
    probs = weights
    if dropout_p > 0.0:
        probs = dropout(weights, dropout_p, True)
    out = torch.matmul(probs, v)  # (B, H, R, D)
    return out, (weights if return_weights else None)
