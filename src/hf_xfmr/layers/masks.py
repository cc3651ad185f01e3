"""Attention masks as boolean tensors: True means "this query may attend to this key".

Masks are kept boolean until a kernel needs them, so they can be combined with a plain `&` and
checked by eye in tests; `to_additive_mask` converts one for kernels that want a float bias.
Shapes broadcast against attention scores (B, H, Tq, Tk).
"""

import torch


def padding_mask(attention_mask):
    """(B, T) tokenizer mask of 0/1 -> bool (B, 1, 1, T): every query may see every real key."""
    if attention_mask.dim() != 2:
        raise ValueError(
            f"attention_mask must be 2-D (batch, seq_len), got shape {tuple(attention_mask.shape)}"
        )
    return attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)


def causal_mask(q_len, k_len=None, device=None):
    """Bool (q_len, k_len) lower-triangular mask, aligned to the end of the keys.

    Query i sits at absolute position i + (k_len - q_len), so with k_len - q_len cached keys in
    front the last query still sees every key and the first cached ones are always visible.
    """
    k_len = q_len if k_len is None else k_len
    ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
    return ones.tril(diagonal=k_len - q_len)  # j <= i + (k_len - q_len)


def sliding_window_mask(q_len, window, k_len=None, device=None):
    """Bool (q_len, k_len) band: True iff |i - j| <= window // 2.

    Follows ModernBERT's local attention, where `window` is the total width (128 means +-64).
    Positions are absolute indices on both sides (no end alignment as in `causal_mask`): local
    attention is used by encoders, where q_len == k_len.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    k_len = q_len if k_len is None else k_len
    i = torch.arange(q_len, device=device)[:, None]  # (q_len, 1)
    j = torch.arange(k_len, device=device)[None, :]  # (1, k_len)
    return (i - j).abs() <= window // 2


def block_diagonal_mask(document_ids):
    """(B, T) document ids of packed sequences -> bool (B, 1, T, T): attend within a document only.

    Ids < 0 mark padding. Padding keys are never visible; a padding query sees only itself, so no
    row is fully masked and softmax never produces NaN (its output is discarded anyway).
    """
    same_doc = document_ids[:, :, None] == document_ids[:, None, :]  # (B, T, T)
    real_key = (document_ids >= 0)[:, None, :]  # (B, 1, T)
    pad_query = (document_ids < 0)[:, :, None]  # (B, T, 1)
    eye = torch.eye(document_ids.shape[-1], dtype=torch.bool, device=document_ids.device)
    mask = (same_doc & real_key) | (pad_query & eye)  # (B, T, T)
    return mask[:, None]  # (B, 1, T, T)


def document_ids_from_position_ids(position_ids):
    """(B, T) position ids restarting at 0 for each packed document -> (B, T) document ids 0, 1, ...

    The first token of a row always starts a document, even when its position id is not 0 (a row
    that begins mid-document), so that real tokens are never mistaken for padding (id -1).
    """
    starts = position_ids == 0
    starts[:, 0] = True
    return starts.long().cumsum(-1) - 1


def document_ids_from_cu_seqlens(cu_seqlens, total_len):
    """Cumulative lengths [0, l1, l1+l2, ...] -> (total_len,) document ids; -1 past the last one."""
    positions = torch.arange(total_len, device=cu_seqlens.device)
    ids = torch.searchsorted(cu_seqlens[1:].long(), positions, right=True)
    return ids.masked_fill(positions >= cu_seqlens[-1], -1)


def combine_masks(*masks):
    """Logical AND of boolean masks with broadcasting; None entries mean "no constraint"."""
    result = None
    for mask in masks:
        if mask is not None:
            result = mask if result is None else result & mask
    return result


def to_additive_mask(mask, dtype):
    """Bool mask -> float bias of `dtype`: 0 where True, finfo(dtype).min where False.

    finfo.min rather than -inf keeps fully masked rows finite. None passes through, and a mask
    that is already floating point is only cast to `dtype`.
    """
    if mask is None:
        return None
    if mask.is_floating_point():
        return mask.to(dtype)
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, torch.finfo(dtype).min)


def decoder_attention_mask(attention_mask, q_len, k_len, document_ids=None, device=None):
    """The self-attention mask of a causal decoder, as `(mask, is_causal)` for the attention kernels.

    attention_mask: None, a (B, k_len) tokenizer mask of 0/1 over the cached and the new tokens, or a
        ready (B, 1, q_len, k_len) mask (bool or additive float) that is returned unchanged.
    q_len / k_len: new tokens and all tokens (cached + new); the queries are the last q_len keys.
    document_ids: optional (B, q_len) ids of packed documents (when q_len == k_len): no query attends
        to another document's keys.
    device: where to build the mask when neither tensor is given (default: theirs, else CPU).

    Returns the cheapest exact form: `(None, True)` for a plain causal prefill (sdpa's causal kernel),
    `(None, False)` for one new token with nothing to hide, else a bool (B, 1, q_len, k_len) mask.
    """
    if attention_mask is not None and attention_mask.dim() == 4:
        return attention_mask, False
    if attention_mask is None and document_ids is None:
        if q_len == 1:
            return None, False  # the single newest token sees every key
        if q_len == k_len:
            return None, True
    for tensor in (attention_mask, document_ids):
        device = tensor.device if tensor is not None else device
    mask = causal_mask(q_len, k_len, device=device)
    mask = mask[None, None]  # (1, 1, Tq, Tk)
    if attention_mask is not None:
        mask = mask & padding_mask(attention_mask)  # (B, 1, Tq, Tk)
    if document_ids is not None:
        if q_len != k_len:
            raise ValueError("document_ids need q_len == k_len: packed documents cannot follow a cache")
        mask = mask & (document_ids[:, :, None] == document_ids[:, None, :])[:, None]  # (B, 1, T, T)
    return mask, False
