"""Packed sequences (several sequences in one row) and ready-made 4-D masks, as every model's forward reads them.

The ecosystem passes packed batches in several forms; `packed_sequence_starts` reads any of them into one
(B, T) bool tensor, True at the first real token of each sequence, from which a model derives what its
layout needs: varlen boundaries when it runs the real tokens only (`layers.padding.encoder_padding`), a
block-diagonal mask when it runs the padded layout (`layers.masks.document_ids_from_starts`), and positions
counted within each sequence when none are given (`layers.masks.positions_in_sequences`).

| keywords                                      | sent by                                                       |
|-----------------------------------------------|---------------------------------------------------------------|
| `cu_seq_lens_q` / `_k`, `max_length_q` / `_k` | transformers' `DataCollatorWithFlattening`, flash kwargs on    |
| `seq_idx`                                     | the same collator with `return_seq_idx=True`                  |
| `cu_seqlens`, `max_seqlen`, `doc_ids`         | `data.collate_packed`, `DataCollatorForMLM(return_cu_seqlens)` |
| `position_ids` that restart inside a row      | any padding-free collator (`config.packed_position_ids`)      |

`cu_seq_lens_*` / `cu_seqlens` index the real tokens taken row by row ([0, l1, l1 + l2, ..., N]); `seq_idx` /
`doc_ids` number the sequences of each row (-1 on padding). The maximum lengths are accepted and recomputed.
Boundaries given explicitly always keep the sequences apart. Restarting `position_ids` alone (a return to the
position of the row's first real token, as packing collators number every sequence from one first position) do
too, unless `config.packed_position_ids` is False: transformers keeps
such sequences apart only under FlashAttention, and its SDPA and eager paths let them attend to each other,
which that switch restores.
"""

import torch

from ..layers.masks import (
    real_sequence_starts,
    sequence_starts_from_cu_seqlens,
    sequence_starts_from_ids,
    sequence_starts_from_positions,
)
from ..layers.padding import check_cu_seqlens
from .input_checks import check_tensor

BOUNDARY_INPUTS = ("cu_seqlens", "cu_seq_lens_q", "cu_seq_lens_k", "doc_ids", "seq_idx")
LENGTH_INPUTS = ("max_seqlen", "max_length_q", "max_length_k")
PACKED_INPUTS = BOUNDARY_INPUTS + LENGTH_INPUTS


def check_packed_keywords(model, packed: dict) -> None:
    """TypeError naming the model for a keyword that is neither one of its inputs nor a packed-batch keyword."""
    unknown = [name for name in packed if name not in PACKED_INPUTS]
    if unknown:
        names = ", ".join(f"`{name}`" for name in unknown)
        raise TypeError(
            f"{type(model).__name__}.forward() got unexpected keyword argument(s) {names}. Besides its named inputs "
            f"it takes the boundaries of packed sequences: {', '.join(PACKED_INPUTS)}."
        )


def has_packed_boundaries(packed: dict) -> bool:
    """Whether `packed` (a forward's extra keywords) gives explicit sequence boundaries."""
    return any(packed.get(name) is not None for name in BOUNDARY_INPUTS)


def packed_sequence_starts(model, batch: int, seq_len: int, attention_mask=None, position_ids=None,
                           past_length: int = 0, packed: dict | None = None):
    """(B, T) bool, True at the first real token of every packed sequence, or None when each row holds one
    sequence (the usual padded batch).

    `packed`: the forward's extra keywords (see the module docstring; others raise a TypeError naming `model`).
    `attention_mask`: the (B, T) 0/1 padding mask or None; a 4-D mask already says who sees whom, so with one
    the boundaries are not looked for (and explicit ones are an error). Reads the tensors to the host once to
    check them and to tell a packed batch from a plain one (not when compiling: then a batch given
    `position_ids` is always treated as packed, which gives the same outputs).
    """
    packed = {name: value for name, value in (packed or {}).items() if value is not None}
    check_packed_keywords(model, packed)
    four_d = attention_mask is not None and attention_mask.dim() == 4
    keep = None if attention_mask is None or four_d else attention_mask.bool()
    if has_packed_boundaries(packed):
        if four_d:
            raise ValueError("Pass either a 4-D `attention_mask` or the boundaries of packed sequences "
                             f"({', '.join(BOUNDARY_INPUTS)}), not both: the 4-D mask already says who sees whom.")
        if past_length:
            raise ValueError("Packed sequences cannot follow cached tokens: pass their boundaries only on a forward "
                             "without `past_key_values`.")
        return real_sequence_starts(_explicit_starts(packed, keep, batch, seq_len), keep)
    if position_ids is None or four_d or past_length or seq_len < 2:
        return None
    if not getattr(model.config, "packed_position_ids", True):
        return None
    starts = real_sequence_starts(sequence_starts_from_positions(position_ids.expand(batch, seq_len), keep), keep)
    if not torch.compiler.is_compiling() and not bool((starts.sum(dim=-1) > 1).any()):
        return None  # one sequence per row
    return starts


def _explicit_starts(packed: dict, keep, batch: int, seq_len: int):
    """Sequence starts (B, T) from explicit boundaries: `cu_seqlens` / `cu_seq_lens_*`, else `doc_ids` / `seq_idx`."""
    bounds = [(name, packed[name]) for name in ("cu_seqlens", "cu_seq_lens_q", "cu_seq_lens_k") if name in packed]
    for name, value in bounds:
        check_tensor(name, value)
    if bounds:
        (name, cu), *others = bounds
        for other, value in others:
            if value.shape != cu.shape or not torch.equal(value.to(cu.device, cu.dtype), cu):
                raise ValueError(f"`{name}` and `{other}` differ: in self-attention the queries and the keys are the "
                                 f"same tokens, so both must hold the same sequence boundaries.")
        if keep is None:
            keep = torch.ones(batch, seq_len, dtype=torch.bool, device=cu.device)
        compiled = torch.compiler.is_compiling()  # (no host reads in a graph: only the static checks)
        check_cu_seqlens(cu, None if compiled else keep.sum(dim=-1).tolist(), name=name)
        return sequence_starts_from_cu_seqlens(cu.to(keep.device), keep)
    name = "doc_ids" if "doc_ids" in packed else "seq_idx"
    ids = packed[name]
    check_tensor(name, ids)
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or tuple(ids.shape) != (batch, seq_len):
        raise ValueError(f"`{name}` must be an integer tensor of shape ({batch}, {seq_len}) numbering the packed "
                         f"sequences of each row, got shape {tuple(ids.shape)} and dtype {ids.dtype}.")
    return sequence_starts_from_ids(ids)


def check_packed_positions(model, position_ids, starts, first_position: int) -> None:
    """A model whose positions start above 0 (RoBERTa: `pad_token_id + 1`) rejects packed sequences numbered from
    a lower position, which would silently shift every position embedding (one host read; none when compiling)."""
    if first_position == 0 or position_ids is None or starts is None or torch.compiler.is_compiling():
        return
    lowest = int(position_ids.expand(starts.shape)[starts].min())
    if lowest < first_position:
        raise ValueError(
            f"A packed sequence of this batch starts at position {lowest}, but {type(model).__name__} numbers "
            f"positions from {first_position} (`pad_token_id` + 1). Number each sequence from {first_position}: "
            f"`DataCollatorWithFlattening(position_ids_start={first_position})`, "
            f"`pack_documents(..., first_position={first_position})`, or drop `position_ids` and pass the boundaries "
            f"(`cu_seq_lens_q` / `cu_seqlens`) so that the model numbers them itself."
        )
