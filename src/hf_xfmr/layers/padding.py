"""Remove and restore padding, so layers can run on (N, ...) real tokens only.

Unpad once at the encoder boundary, run every layer on the packed tokens with `cu_seqlens`
(varlen attention), pad once at the end (the ModernBERT recipe). `cu_seqlens` is int32 because
flash-attn requires it.
"""

from typing import NamedTuple

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


class VarlenBatch(NamedTuple):
    """Where the real tokens of a (B, T) batch are, once they are packed into (N, ...).

    indices: (N,) positions of the real tokens in the flattened (B * T) batch, or None when every
        position is real (then unpadding is a plain reshape).
    cu_seqlens: (D + 1,) int32 document boundaries in the packed tokens: [0, l1, l1 + l2, ..., N].
    max_seqlen: the longest document (flash-attn needs it on the host).
    bounds: `cu_seqlens` as a Python list (the CPU kernels loop over documents with it).
    """

    indices: torch.Tensor | None
    cu_seqlens: torch.Tensor
    max_seqlen: int
    bounds: list


def varlen_batch(attention_mask, batch, seq_len, cu_seqlens=None, device=None):
    """Validate a padded or packed batch and describe its real tokens as a `VarlenBatch`.

    attention_mask: (B, T) 0/1 or None (every token real). Every row needs at least one real token.
    cu_seqlens: optional (D + 1,) boundaries of documents packed several to a row (the packer's
        collators return them), indexing the real tokens taken row by row. Without it each row is
        one document. A document may not continue from one row into the next.
    Reads the mask and the boundaries to the host once: call it once per forward, at the encoder boundary.
    """
    device = attention_mask.device if attention_mask is not None else device
    if attention_mask is None or bool(attention_mask.all()):
        indices = None
        row_lengths = [seq_len] * batch
    else:
        keep = attention_mask.bool()
        lengths = keep.sum(dim=-1)  # (B,)
        row_lengths = lengths.tolist()
        if min(row_lengths) == 0:
            empty = row_lengths.index(0)
            raise ValueError(
                f"attention_mask row {empty} has no real token (all zeros): there is nothing to attend to and "
                f"its outputs would be meaningless. Drop empty sequences from the batch."
            )
        indices = keep.flatten().nonzero().flatten()  # (N,)
    total = sum(row_lengths)
    row_ends = torch.tensor(row_lengths).cumsum(0).tolist()
    if cu_seqlens is None:
        bounds = [0, *row_ends]
    else:
        if cu_seqlens.dim() != 1 or cu_seqlens.dtype.is_floating_point or cu_seqlens.numel() < 2:
            raise ValueError(
                f"cu_seqlens must be a 1-D integer tensor [0, l1, l1 + l2, ..., N] of document boundaries, got "
                f"shape {tuple(cu_seqlens.shape)} and dtype {cu_seqlens.dtype}."
            )
        bounds = cu_seqlens.tolist()
        steps = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
        if bounds[0] != 0 or bounds[-1] != total or min(steps) < 0:
            raise ValueError(
                f"cu_seqlens {bounds[:4]}{'...' if len(bounds) > 4 else ''} (ending at {bounds[-1]}) does not match "
                f"the batch: it must start at 0, never decrease and end at the number of real tokens, {total}. "
                f"Build it from the same batch (e.g. hf_xfmr.data.collate_packed)."
            )
        crossing = sorted(set(row_ends) - set(bounds))
        if crossing:
            raise ValueError(
                f"cu_seqlens lets a document run across a row boundary (real-token offset {crossing[0]}): packed "
                f"documents must each lie within one row. Build cu_seqlens from the same batch."
            )
    cu = torch.tensor(bounds, dtype=torch.int32, device=device)
    max_seqlen = max(b - a for a, b in zip(bounds[:-1], bounds[1:]))
    return VarlenBatch(indices, cu, max_seqlen, bounds)
