"""Remove and restore padding, so layers can run on (N, ...) real tokens only.

Unpad once at the encoder boundary, run every layer on the packed tokens with `cu_seqlens`
(varlen attention), pad once at the end (the ModernBERT recipe). `cu_seqlens` is int32 because
flash-attn requires it. `encoder_padding` decides, once per forward, whether a batch runs unpadded.
"""

import contextlib
import contextvars
from itertools import accumulate
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .masks import block_diagonal_mask, cu_seqlens_from_starts, document_ids_from_starts, padding_mask


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
    shape: (B, T) of the padded batch, for `unpad` and `pad`.
    dense_index, dense_mask: where attention runs as one masked call over the documents padded to the
        longest (on GPUs, where one launch per document costs more than the padding; see
        `attention.self_attention`): (N,) positions of the real tokens in that (D * max_seqlen) grid and
        its (D, 1, 1, max_seqlen) bool key mask. None: attention runs document by document.
    """

    indices: torch.Tensor | None
    cu_seqlens: torch.Tensor
    max_seqlen: int
    bounds: list
    shape: tuple = ()
    dense_index: torch.Tensor | None = None
    dense_mask: torch.Tensor | None = None

    def unpad(self, x):
        """(B, T, ...) or (1, T, ...) (the same for every row) -> (N, ...): the real tokens, row by row."""
        batch, seq_len = self.shape
        flat = x.expand(batch, seq_len, *x.shape[2:]).reshape(batch * seq_len, *x.shape[2:])  # (B * T, ...)
        return flat if self.indices is None else flat.index_select(0, self.indices)

    def unpad_inputs(self, *inputs):
        """Each (B, T, ...) or (1, T, ...) input as (1, N, ...), None kept: the real tokens with a batch
        dimension of one, so embeddings written for (B, T) inputs take them unchanged."""
        return tuple(None if x is None else self.unpad(x).unsqueeze(0) for x in inputs)

    def pad(self, x):
        """(N, ...) -> (B, T, ...), zeros at padding positions."""
        if self.indices is None:
            return x.view(*self.shape, *x.shape[1:])
        return pad_input(x, self.indices, *self.shape)

    def pad_outputs(self, hidden_states, all_hidden_states=None):
        """A stack's outputs back to the padded layout: (N, C) -> (B, T, C) and each collected hidden state
        likewise (None kept), zeros at padding."""
        padded = None if all_hidden_states is None else tuple(self.pad(h) for h in all_hidden_states)
        return self.pad(hidden_states), padded


def varlen_batch(attention_mask, batch, seq_len, cu_seqlens=None, device=None):
    """Validate a padded or packed batch and describe its real tokens as a `VarlenBatch`.

    attention_mask: (B, T) 0/1 or None (every token real). Every row needs at least one real token.
    cu_seqlens: optional (D + 1,) boundaries of documents packed several to a row (the packer's
        collators return them), indexing the real tokens taken row by row. Without it each row is
        one document. A document may not continue from one row into the next.
    Reads the mask and the boundaries to the host once: call it once per forward, at the encoder boundary.
    """
    device = attention_mask.device if attention_mask is not None else device
    keep = None if attention_mask is None else attention_mask.bool()
    row_lengths = [seq_len] * batch if keep is None else keep.sum(dim=-1).tolist()  # one host read
    return _varlen(keep, row_lengths, batch, seq_len, cu_seqlens, device)


def check_cu_seqlens(cu_seqlens, row_lengths: list | None = None, name: str = "cu_seqlens") -> list | None:
    """Raise a ValueError naming `name` unless `cu_seqlens` is a 1-D integer tensor of boundaries [0, l1, l1 + l2,
    ..., N] of documents packed several to a row. With `row_lengths` (the real tokens of each row, on the host)
    also check that it starts at 0, never decreases, ends at N and lets no document cross a row end, and return
    the boundaries as a list (one host read)."""
    if cu_seqlens.dim() != 1 or cu_seqlens.dtype.is_floating_point or cu_seqlens.dtype == torch.bool or \
            cu_seqlens.numel() < 2:
        raise ValueError(
            f"{name} must be a 1-D integer tensor [0, l1, l1 + l2, ..., N] of document boundaries, got "
            f"shape {tuple(cu_seqlens.shape)} and dtype {cu_seqlens.dtype}."
        )
    if row_lengths is None:
        return None
    bounds = cu_seqlens.tolist()
    total = sum(row_lengths)
    if bounds[0] != 0 or bounds[-1] != total or any(b < a for a, b in zip(bounds[:-1], bounds[1:])):
        raise ValueError(
            f"{name} {bounds[:4]}{'...' if len(bounds) > 4 else ''} (ending at {bounds[-1]}) does not match "
            f"the batch: it must start at 0, never decrease and end at the number of real tokens, {total}. "
            f"Build it from the same batch (e.g. hf_xfmr.data.collate_packed)."
        )
    crossing = sorted(set(accumulate(row_lengths)) - set(bounds))
    if crossing:
        raise ValueError(
            f"{name} lets a document run across a row boundary (real-token offset {crossing[0]}): packed "
            f"documents must each lie within one row. Build {name} from the same batch."
        )
    return bounds


def _varlen(keep, row_lengths, batch, seq_len, cu_seqlens, device, dense=False):
    """`varlen_batch` once the rows' numbers of real tokens are on the host; `dense` adds the layout of one
    masked attention call over the documents padded to the longest."""
    if all(length == seq_len for length in row_lengths):
        indices = None  # no padding: unpadding is a reshape
    else:
        if 0 in row_lengths:
            empty = row_lengths.index(0)
            raise ValueError(
                f"attention_mask row {empty} has no real token (all zeros): there is nothing to attend to and "
                f"its outputs would be meaningless. Drop empty sequences from the batch."
            )
        indices = keep.flatten().nonzero().flatten()  # (N,)
    total = sum(row_lengths)
    bounds = [0, *accumulate(row_lengths)] if cu_seqlens is None else check_cu_seqlens(cu_seqlens, row_lengths)
    cu = torch.tensor(bounds, dtype=torch.int32, device=device)
    max_seqlen = max(b - a for a, b in zip(bounds[:-1], bounds[1:]))
    dense_index = dense_mask = None
    if dense:
        starts = cu[:-1].long()  # (D,)
        lengths = cu[1:].long() - starts  # (D,)
        doc = torch.repeat_interleave(torch.arange(len(bounds) - 1, device=device), lengths, output_size=total)  # (N,)
        dense_index = doc * max_seqlen + torch.arange(total, device=device) - starts[doc]  # (N,)
        dense_mask = (torch.arange(max_seqlen, device=device) < lengths[:, None])[:, None, None, :]  # (D, 1, 1, L)
    return VarlenBatch(indices, cu, max_seqlen, bounds, (batch, seq_len), dense_index, dense_mask)


# Set by `padded_layout`: encoders run the padded layout, as with `unpad_inputs=False`.
PADDED_LAYOUT = contextvars.ContextVar("hf_xfmr_padded_layout", default=False)


@contextlib.contextmanager
def padded_layout(active: bool = True):
    """Within this block (when `active`), `encoder_padding` keeps every batch in the padded layout.

    For a loss that reads outputs at padding positions (labels that are not -100 there): the reference
    computes real values at those positions, which unpadding would leave as zeros, so the loss then
    equals the reference's only on the padded path."""
    token = PADDED_LAYOUT.set(bool(active))
    try:
        yield
    finally:
        PADDED_LAYOUT.reset(token)


def labels_read_padding(labels, attention_mask) -> bool:
    """Whether per-token `labels` (B, T) put a target (not -100) on a padding position of `attention_mask`
    (one host read; False under torch.compile, which runs the padded layout anyway)."""
    if labels is None or attention_mask is None or labels.shape != attention_mask.shape:
        return False
    if torch.compiler.is_compiling():
        return False
    return bool(((labels != -100) & (attention_mask == 0)).any())


def encoder_padding(attention_mask, unpad: bool, dense: bool | None = None, prefix_only: bool = False, starts=None,
                    any_side: bool = False):
    """How a bidirectional encoder runs a (B, T) batch: `(varlen, mask)`, at most one of them set.

    - no mask, or no padding: `(None, None)`, the padded layout without a mask (the fastest kernels, no
      gathers);
    - `unpad` and every row starting with a real token (right padding, as every BERT-family tokenizer
      pads): `(VarlenBatch, None)`, every layer then runs on the N real tokens only (off the CPU, with the
      layout for one masked attention call per layer: `VarlenBatch.dense_index`);
    - otherwise `(None, mask)` with the (B, 1, 1, T) bool mask (True = attend): the padded layout, as the
      reference runs it. That is the case when `unpad` is off (the user's switch, or attention weights
      asked for), under torch.compile (the number of real tokens would size tensors, and reading the mask
      would break the graph) and when some row starts with padding: whatever reads position 0 ([CLS]
      pooling) then sees the reference's values, not the zeros unpadding leaves at padding positions.
    Both layouts call the same modules in the same order; only the tensors' layout differs.
    `dense` (default: off the CPU) prepares one masked attention call per layer instead of one per sequence.
    `prefix_only` (attention that depends on the distance between positions, T5's relative bias): unpad only
    when no row has padding before a real token, since packing would bring its real tokens closer together.
    `starts` (B, T) bool, True where a packed sequence begins (`models.packing.packed_sequence_starts`): each
    sequence attends to itself only, unpadded (one varlen document per sequence) or padded with a
    block-diagonal (B, 1, T, T) mask, by the same rules; then there is a layout even without padding.
    `any_side` (decoders, which read no fixed position): rows that start with padding (left padding) are unpadded
    too; a row without any real token (a prefill chunk of a left-padded row) keeps the batch padded.
    Reads the mask to the host once (not when compiling).
    """
    if attention_mask is None and starts is None:
        return None, None
    keep = None if attention_mask is None else attention_mask.bool()

    def padded():  # the padded layout's mask: (B, 1, 1, T) padding, or block-diagonal (B, 1, T, T)
        if starts is None:
            return padding_mask(attention_mask)
        return block_diagonal_mask(document_ids_from_starts(starts, keep))

    if torch.compiler.is_compiling():
        return None, padded()
    batch, seq_len = (keep if keep is not None else starts).shape
    if seq_len == 0:
        return None, None
    row_lengths, first_real = _row_counts(keep, batch, seq_len, prefix_only)
    if starts is None and all(length == seq_len for length in row_lengths):
        return None, None
    if not unpad or PADDED_LAYOUT.get() or not (any_side or all(first_real)) or (any_side and 0 in row_lengths):
        return None, padded()
    device = (keep if keep is not None else starts).device
    dense = device.type != "cpu" if dense is None else dense
    cu_seqlens = None if starts is None else cu_seqlens_from_starts(starts, keep)
    return _varlen(keep, row_lengths, batch, seq_len, cu_seqlens, device, dense=dense), None


def _row_counts(keep, batch: int, seq_len: int, prefix_only: bool) -> tuple[list, list]:
    """(real tokens of each row, whether each row starts with a real token) as Python lists, in one host read;
    `prefix_only`: a row with padding followed by a real token counts as not starting with one."""
    if keep is None:
        return [seq_len] * batch, [1] * batch
    starts_real = keep[:, 0]  # (B,)
    if prefix_only:  # and no padding followed by a real token
        starts_real = starts_real & ~(keep[:, 1:] & ~keep[:, :-1]).any(dim=-1)
    counts = torch.cat([keep.sum(dim=-1), starts_real.long()]).tolist()  # one host read: (2B,)
    return counts[:batch], counts[batch:]
