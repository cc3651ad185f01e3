"""Remove and restore padding, so layers can run on (N, ...) real tokens only.

Unpad once at the encoder boundary, run every layer on the packed tokens with `cu_seqlens`
(varlen attention), pad once at the end (the ModernBERT recipe). `cu_seqlens` is int32 because
flash-attn requires it.
"""

import torch
import torch.nn.functional as F


def unpad_input(hidden, attention_mask):
    """(B, T, ...) and (B, T) 0/1 mask -> (hidden (N, ...), indices (N,), cu_seqlens (B+1,), max_seqlen).

    `indices` are positions in the flattened (B * T) batch; max_seqlen is a Python int because
    flash-attn needs it on the host (one device sync, paid once per forward).
    """
    keep = attention_mask.bool()
    seqlens = keep.sum(dim=-1, dtype=torch.int32)  # (B,)
    indices = keep.flatten().nonzero().flatten()  # (N,)
    cu_seqlens = F.pad(seqlens.cumsum(0, dtype=torch.int32), (1, 0))  # (B+1,) starting at 0
    max_seqlen = int(seqlens.max()) if seqlens.numel() else 0
    flat = hidden.reshape(-1, *hidden.shape[2:])  # (B * T, ...)
    return flat[indices], indices, cu_seqlens, max_seqlen


def pad_input(hidden_unpadded, indices, batch, seqlen):
    """(N, ...) -> (B, T, ...) with zeros at pad positions; out-of-place, so gradients flow."""
    rest = hidden_unpadded.shape[1:]
    flat = hidden_unpadded.new_zeros(batch * seqlen, *rest)  # (B * T, ...)
    flat = flat.index_put((indices,), hidden_unpadded)
    return flat.view(batch, seqlen, *rest)  # (B, T, ...)


def unpad_input_ids(input_ids, attention_mask):
    """(B, T) ids -> (ids (N,), indices, cu_seqlens, max_seqlen, position_ids (N,)).

    Position ids count real tokens only and restart at 0 for each sequence, whichever side the
    padding is on.
    """
    ids, indices, cu_seqlens, max_seqlen = unpad_input(input_ids, attention_mask)
    positions = attention_mask.long().cumsum(-1) - 1  # (B, T): index among real tokens
    return ids, indices, cu_seqlens, max_seqlen, positions.flatten()[indices]
