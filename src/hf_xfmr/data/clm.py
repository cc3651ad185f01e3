"""Causal language modelling (GPT): packing a token stream into fixed rows, and the collator.

`pack_stream` concatenates documents, each followed by EOS (GPT-2 recipe, Radford et al. 2019),
and cuts rows of exactly `seq_len` tokens. A document that does not fit is split and its tail
starts the next row, so no token is ever dropped; the last, shorter row is yielded too unless
`drop_last=True`.

`DataCollatorForCLM` pads rows and sets labels (the model shifts them). With
`isolate_documents=True` every document in a row is its own sequence: `position_ids` restart at 0
after each EOS, the attention mask is block-diagonal causal (B, 1, L, L), and the first token of
a document is not predicted from the previous document's EOS.
"""

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

from .collation import (
    IGNORE_INDEX,
    SeededMixin,
    cu_seqlens_from_positions,
    intra_op_threads,
    pad_ragged,
    read_features,
)
from .packing import block_diagonal_mask


def pack_stream(documents: Iterable[Sequence[int]], seq_len: int, eos_token_id: int | None,
                drop_last: bool = False) -> Iterator[dict]:
    """Yield `{"input_ids", "position_ids"}` rows of `seq_len` tokens from tokenized documents.

    EOS (if not None) is appended to each document. `position_ids` restart at 0 at every document
    start and at every row start (a carried-over tail continues its document in a new row).
    """
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2 for causal LM rows, got {seq_len}.")
    ids: list[int] = []
    pos: list[int] = []
    seen = False
    for doc in documents:
        doc = list(doc)
        if eos_token_id is not None:
            doc.append(eos_token_id)
        if not doc:
            continue
        seen = True
        ids.extend(doc)
        pos.extend(range(len(doc)))
        while len(ids) >= seq_len:  # emit full rows; the remainder is carried to the next row
            yield {"input_ids": ids[:seq_len], "position_ids": _restart_row(pos[:seq_len])}
            ids, pos = ids[seq_len:], pos[seq_len:]
    if not seen:
        raise ValueError("pack_stream got no tokens: the corpus is empty. Pass non-empty documents.")
    if ids and not drop_last:
        yield {"input_ids": ids, "position_ids": _restart_row(pos)}


def _restart_row(pos: list[int]) -> list[int]:
    """Positions of a row whose first document may be a carried tail: make that tail start at 0."""
    if not pos or pos[0] == 0:
        return pos
    try:
        cut = pos.index(0)  # where the next document starts
    except ValueError:
        cut = len(pos)
    return list(range(cut)) + pos[cut:]


class PackedCLMDataset(torch.utils.data.IterableDataset):
    """Iterable dataset of packed CLM rows from raw texts (tokenized on the fly).

    texts: any iterable of strings (or a `datasets` corpus with a `text` column).
    """

    def __init__(self, texts, tokenizer, seq_len: int, drop_last: bool = False):
        self.texts, self.tokenizer, self.seq_len, self.drop_last = texts, tokenizer, seq_len, drop_last
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            raise ValueError("Packing for causal LM needs tokenizer.eos_token to separate documents; add one.")
        self.eos = eos

    def __iter__(self):
        from .corpus import iter_texts

        def docs():
            for batch in iter_texts(self.texts, batch_size=256):
                yield from self.tokenizer(batch, add_special_tokens=False)["input_ids"]

        return pack_stream(docs(), self.seq_len, self.eos, self.drop_last)


@dataclass
class DataCollatorForCLM(SeededMixin):
    """Pads rows for causal LM; labels are the inputs with -100 on padding.

    Args:
        tokenizer: needs a pad token, or an EOS token (used as pad; labels use the attention mask,
            so real EOS tokens are still predicted).
        isolate_documents: keep the documents of a packed row apart (see module docstring).
        return_cu_seqlens: also return `cu_seqlens`/`max_seqlen` (varlen attention kernels).
        mask_dtype: format of the isolating (B, 1, L, L) mask. None: bool, True = may attend (what
            sdpa/flex take; transformers 5.x passes a 4D mask through as is). A float dtype: an
            additive mask, 0 where allowed and the dtype's minimum elsewhere (eager attention).
        pad_to_multiple_of: round the padded length up.
        num_threads: torch intra-op threads while collating; None leaves torch's setting alone.
    """

    tokenizer: object
    isolate_documents: bool = False
    return_cu_seqlens: bool = False
    mask_dtype: torch.dtype | None = None
    pad_to_multiple_of: int | None = None
    num_threads: int | None = 1
    seed: int | None = None
    generator: torch.Generator | None = None

    def __post_init__(self):
        pad = getattr(self.tokenizer, "pad_token_id", None)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if pad is None and eos is None:
            raise ValueError("Causal LM batching needs tokenizer.pad_token or tokenizer.eos_token; set one "
                             "(e.g. tokenizer.pad_token = tokenizer.eos_token).")
        if self.isolate_documents and eos is None:
            raise ValueError("isolate_documents=True finds document boundaries at EOS: the tokenizer has no eos_token.")
        self.pad_token_id = pad if pad is not None else eos
        self.eos_token_id = eos

    def __call__(self, examples) -> dict[str, torch.Tensor]:
        with intra_op_threads(self.num_threads):
            return self._collate(examples)

    def _collate(self, examples) -> dict[str, torch.Tensor]:
        cols = read_features(examples)
        input_ids, real = pad_ragged(cols["input_ids"], self.pad_token_id, pad_to_multiple_of=self.pad_to_multiple_of)
        B, L = input_ids.shape
        labels = torch.where(real, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        batch = {"input_ids": input_ids, "attention_mask": real.long(), "labels": labels}
        if not self.isolate_documents:
            if "position_ids" in cols:
                batch["position_ids"], _ = pad_ragged(cols["position_ids"], 0, length=L)
            return batch
        # Document starts: the row start and every token after an EOS.
        pos = torch.arange(L).expand(B, L)
        start = torch.zeros(B, L, dtype=torch.bool)
        start[:, 0] = True
        start[:, 1:] = input_ids[:, :-1] == self.eos_token_id
        start &= real
        first = torch.where(start, pos, torch.zeros_like(pos)).cummax(1).values  # start of each token's doc
        position_ids = torch.where(real, pos - first, torch.zeros_like(pos))
        doc_ids = torch.where(real, torch.cumsum(start, 1) - 1, torch.full_like(pos, -1))
        labels[start] = IGNORE_INDEX  # never predict a document's first token from another document
        batch["position_ids"] = position_ids
        allowed = block_diagonal_mask(doc_ids, causal=True)  # (B, 1, L, L) bool
        if self.mask_dtype is not None:
            additive = torch.zeros(allowed.shape, dtype=self.mask_dtype)
            allowed = additive.masked_fill_(~allowed, torch.finfo(self.mask_dtype).min)
        batch["attention_mask"] = allowed
        if self.return_cu_seqlens:
            batch["cu_seqlens"], batch["max_seqlen"] = cu_seqlens_from_positions(position_ids, real)
        return batch
