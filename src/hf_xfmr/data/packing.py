"""Best-fit packing of whole documents into fixed-size rows (encoders and decoders).

Padding wastes compute: at sequence length 512 a corpus of short documents can be mostly pad.
`pack_documents` places whole documents into rows of at most `max_len` tokens with the
best-fit-decreasing heuristic (longest first; each into the fullest row that still has room),
which typically fills > 95% of every row. Each packed row carries `position_ids` that restart at
0 for every document, from which collators derive flash-attention style `cu_seqlens`, so a model
can keep documents apart (varlen attention, or a block-diagonal mask).
"""

import bisect
from collections.abc import Sequence

import torch

from .collation import cu_seqlens_from_lengths, pad_ragged


def best_fit_bins(lengths: Sequence[int], max_len: int) -> list[list[int]]:
    """Group document indices into bins of total length <= max_len (best-fit decreasing).

    Deterministic: ties are broken by document index. O(n log n) with a sorted list of free space.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}.")
    too_long = [i for i, n in enumerate(lengths) if n > max_len]
    if too_long:
        raise ValueError(
            f"{len(too_long)} document(s) (e.g. index {too_long[0]}, {lengths[too_long[0]]} tokens) are longer "
            f"than max_len={max_len}, and packing never splits a document: truncate or chunk them first "
            f"(e.g. tokenizer(..., truncation=True, max_length={max_len})) or raise max_len."
        )
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    free_keys: list[tuple[int, int]] = []  # sorted (free space, bin id)
    for i in order:
        n = lengths[i]
        if n == 0:
            continue
        k = bisect.bisect_left(free_keys, (n, -1))  # the bin with the least room that still fits
        if k < len(free_keys):
            free, b = free_keys.pop(k)
            bins[b].append(i)
            bisect.insort(free_keys, (free - n, b))
        else:
            bins.append([i])
            bisect.insort(free_keys, (max_len - n, len(bins) - 1))
    return bins


def pack_documents(documents: Sequence[Sequence[int]], max_len: int, first_position: int = 0) -> list[dict]:
    """Pack tokenized documents (each already with its special tokens) into rows of <= max_len tokens.

    Returns one dict per row: `input_ids` (documents concatenated), `position_ids` (restarting at
    `first_position` for each document: 0, or RoBERTa's `pad_token_id + 1`), `seq_lens` (document lengths in
    row order) and `doc_index` (which input documents the row holds). Feed the rows to `DataCollatorForMLM`
    (it returns `cu_seqlens`) or to `collate_packed`.
    """
    if len(documents) == 0:
        raise ValueError("Nothing to pack: the list of documents is empty.")
    docs = [list(d) for d in documents]
    rows = []
    for members in best_fit_bins([len(d) for d in docs], max_len):
        members = sorted(members)  # keep corpus order inside a row
        ids, pos = [], []
        for i in members:
            ids.extend(docs[i])
            pos.extend(range(first_position, first_position + len(docs[i])))
        rows.append({"input_ids": ids, "position_ids": pos, "seq_lens": [len(docs[i]) for i in members],
                     "doc_index": members})
    return rows


def packing_efficiency(rows: Sequence[dict], max_len: int) -> float:
    """Fraction of the `len(rows) * max_len` slots that hold real tokens (1.0 = no padding)."""
    if not rows:
        return 0.0
    return sum(len(r["input_ids"]) for r in rows) / (len(rows) * max_len)


def collate_packed(rows: Sequence[dict], pad_token_id: int, max_len: int | None = None) -> dict[str, torch.Tensor]:
    """Batch packed rows: input_ids, attention_mask, position_ids (B, L), cu_seqlens (D + 1,) int32, max_seqlen.

    `cu_seqlens` indexes the real tokens of the batch flattened row by row (`input_ids[attention_mask.bool()]`),
    the layout varlen attention kernels expect. Also returns `doc_ids` (B, L): document number
    within the row, -1 on padding, for block-diagonal masks (`block_diagonal_mask`).
    """
    input_ids, real = pad_ragged([r["input_ids"] for r in rows], pad_token_id, length=max_len)
    position_ids, _ = pad_ragged([r["position_ids"] for r in rows], 0, length=input_ids.shape[1])
    row_doc_ids = [[k for k, n in enumerate(r["seq_lens"]) for _ in range(n)] for r in rows]
    doc_ids, _ = pad_ragged(row_doc_ids, -1, length=input_ids.shape[1])
    cu, max_seqlen = cu_seqlens_from_lengths([n for r in rows for n in r["seq_lens"]])
    return {"input_ids": input_ids, "attention_mask": real.long(), "position_ids": position_ids,
            "doc_ids": doc_ids, "cu_seqlens": cu, "max_seqlen": max_seqlen}


def block_diagonal_mask(doc_ids: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """(B, 1, L, L) bool mask, True where query i may attend to key j: same document, not padding.

    `doc_ids` (B, L) numbers the documents of each row, -1 on padding. With `causal`, also j <= i.
    Padding rows attend to themselves only, so softmax never sees an empty row.
    """
    same = (doc_ids[:, :, None] == doc_ids[:, None, :]) & (doc_ids[:, None, :] >= 0)  # (B, L, L)
    if causal:
        L = doc_ids.shape[1]
        same &= torch.ones(L, L, dtype=torch.bool).tril()
    same |= torch.eye(doc_ids.shape[1], dtype=torch.bool)
    return same[:, None]
