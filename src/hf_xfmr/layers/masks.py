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
    """(B, T) position ids restarting for each packed document -> (B, T) document ids 0, 1, ... per row.

    A document starts at the first token of a row and wherever the position returns to that token's
    position (`sequence_starts_from_positions`): rows of documents numbered from 0 (or from any other first
    position) split into their documents, and a row of other positions is one document.
    """
    return sequence_starts_from_positions(position_ids).long().cumsum(-1) - 1


def sequence_starts_from_positions(position_ids, keep=None):
    """(B, T) position ids -> (B, T) bool, True where a packed sequence starts: at every real token whose
    position equals the position of its row's first real token (`keep`: (B, T) bool real tokens, None: all).

    Packing collators number each sequence from the same first position (transformers'
    `DataCollatorWithFlattening`: `position_ids_start`, 0 by default; RoBERTa's `pad_token_id + 1`), so each
    return to it starts a sequence, while positions in any other order (reversed, shifted) stay one sequence."""
    if keep is None:
        first = position_ids[:, :1]  # (B, 1)
    else:
        index = (keep.long().cumsum(-1) == 0).sum(-1, keepdim=True).clamp(max=position_ids.shape[-1] - 1)  # (B, 1)
        first = position_ids.gather(1, index)  # (B, 1) the first real token's position
    starts = position_ids == first  # (B, T)
    return starts if keep is None else starts & keep


def sequence_starts_from_ids(sequence_ids):
    """(B, T) ids of packed sequences (one id on all of a sequence's tokens, e.g. `seq_idx`) -> (B, T) bool
    starts: the first token of each row and every token whose id differs from the previous token's."""
    starts = torch.ones(sequence_ids.shape, dtype=torch.bool, device=sequence_ids.device)
    starts[:, 1:] = sequence_ids[:, 1:] != sequence_ids[:, :-1]
    return starts


def sequence_starts_from_cu_seqlens(cu_seqlens, keep):
    """(D + 1,) boundaries [0, l1, l1 + l2, ..., N] of sequences among the real tokens taken row by row, and the
    (B, T) bool real-token mask -> (B, T) bool starts (True at the first real token of each sequence)."""
    flat = keep.flatten()  # (B * T,)
    real_index = flat.long().cumsum(0) - 1  # (B * T,) index among the real tokens
    starts = flat & torch.isin(real_index, cu_seqlens[:-1].long())
    return starts.view(keep.shape)


def real_sequence_starts(starts, keep=None):
    """`starts` (B, T) restricted to real tokens (`keep`, None: all), with the first real token of each row
    always starting a sequence (left padding, a row that begins mid-sequence)."""
    if keep is None:
        starts = starts.clone()
        starts[:, 0] = True
        return starts
    first = keep & (keep.long().cumsum(-1) == 1)  # (B, T) each row's first real token
    return (starts & keep) | first


def document_ids_from_starts(starts, keep=None):
    """(B, T) bool sequence starts and real-token mask (None: all real) -> (B, T) ids numbering the packed
    sequences of the whole batch 0, 1, 2, ... row after row, -1 at padding (`block_diagonal_mask`'s input)."""
    starts = real_sequence_starts(starts, keep)
    ids = starts.flatten().long().cumsum(0).view(starts.shape) - 1  # (B, T)
    return ids if keep is None else ids.masked_fill(~keep, -1)


def positions_in_sequences(starts, keep=None):
    """(B, T) bool sequence starts -> (B, T) each token's index within its packed sequence (0 at its start)."""
    starts = real_sequence_starts(starts, keep)
    index = torch.arange(starts.shape[-1], device=starts.device).expand(starts.shape)  # (B, T)
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=-1).values  # (B, T) start of the sequence
    return index - first


def cu_seqlens_from_starts(starts, keep=None):
    """(B, T) bool sequence starts -> (D + 1,) int32 boundaries of the sequences among the real tokens taken
    row by row, the layout of varlen kernels. Reads the number of sequences to the host."""
    starts = real_sequence_starts(starts, keep)
    flat = starts.flatten() if keep is None else starts.flatten()[keep.flatten()]  # (N,)
    begin = flat.nonzero().flatten().to(torch.int32)  # (D,)
    end = torch.tensor([flat.numel()], dtype=torch.int32, device=flat.device)
    return torch.cat([begin, end])  # (D + 1,)


def document_ids_from_cu_seqlens(cu_seqlens, total_len):
    """Cumulative lengths [0, l1, l1+l2, ...] -> (total_len,) document ids; -1 past the last one."""
    positions = torch.arange(total_len, device=cu_seqlens.device)
    ids = torch.searchsorted(cu_seqlens[1:].long(), positions, right=True)
    return ids.masked_fill(positions >= cu_seqlens[-1], -1)


def ready_mask(mask):
    """A ready-made 4-D mask as the kernels take it: bool (True = attend) and additive float masks as they are,
    an integer 0/1 mask as bool."""
    if mask is None or mask.dtype == torch.bool or mask.is_floating_point():
        return mask
    return mask != 0


def restrict_mask(mask, allowed):
    """`mask` (bool, additive float or None) with the keys where the bool `allowed` is False hidden as well."""
    if mask is None or mask.dtype == torch.bool:
        return combine_masks(mask, allowed)
    return mask.masked_fill(~allowed, torch.finfo(mask.dtype).min)


def visible_keys(mask):
    """(B, 1, 1, S) bool: the keys some query may see under a (B, 1, T, S) bool or additive mask (what
    cross-attention needs of an encoder's ready-made 4-D mask: its padding)."""
    keep = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min
    return keep.any(dim=-2, keepdim=True)


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
        return ready_mask(attention_mask), False
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


def causal_window_mask(q_len, k_len, window, device=None):
    """Bool (q_len, k_len): causal attention limited to the last `window` keys, the query's own included
    (Mistral's sliding window: key j is visible to query i iff 0 <= i - j < window). Aligned to the end of the
    keys as `causal_mask` is: with k_len - q_len cached keys in front, query i sits at i + (k_len - q_len)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    i = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)  # (q_len, 1) absolute query positions
    j = torch.arange(k_len, device=device)[None, :]  # (1, k_len)
    distance = i - j
    return (distance >= 0) & (distance < window)
