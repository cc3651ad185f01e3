"""Masked language modelling collator: BERT/RoBERTa/DistilBERT (15%), ModernBERT (30%), ALBERT n-grams.

Recipe (BERT, Devlin et al. 2019, sec. 3.1 and appendix A.1): select `mlm_probability` of the
tokens, never special or pad tokens; of the selected, 80% become the mask token, 10% a random
token, 10% stay unchanged; labels are the original ids at selected positions and -100 elsewhere.

Selection works on *units*: single tokens, or whole words when `whole_word_mask=True`. Word
boundaries come from the fast tokenizer's `word_ids` (or its `offset_mapping`), never from '##'
prefixes, so WordPiece, Unigram and byte-level BPE vocabularies all work. With `max_ngram > 1`
(ALBERT, Lan et al. 2020, sec. 4.1) selection picks spans of n consecutive units with
p(n) ∝ 1/n; the span-start rate is solved so that the expected fraction of covered units is
still `mlm_probability`.

Deviation from transformers' `DataCollatorForLanguageModeling`: whole-word masking keeps the
80/10/10 split (as the original BERT whole-word release does) instead of forcing 100% [MASK].
"""

from dataclasses import dataclass

import torch

from .collation import (
    IGNORE_INDEX,
    intra_op_threads,
    SeededMixin,
    collate_extra,
    cu_seqlens_from_lengths,
    cu_seqlens_from_positions,
    pad_ragged,
    pad_word_ids,
    read_features,
    require_token,
    special_ids_tensor,
)


def ngram_probs(max_ngram: int) -> torch.Tensor:
    """p(n) ∝ 1/n for n = 1..max_ngram (ALBERT's n-gram masking, also XLNet's span lengths)."""
    p = 1.0 / torch.arange(1, max_ngram + 1, dtype=torch.float64)
    return p / p.sum()


def span_start_rate(target: float, max_ngram: int) -> float:
    """Rate q of span starts so that a unit is covered with probability `target`.

    A unit is left uncovered iff no span starting k units earlier reaches it:
    P(uncovered) = prod_k (1 - q * P(n > k)). Solved by bisection (it is monotone in q).
    """
    if max_ngram == 1:
        return target
    p = ngram_probs(max_ngram)
    survive = torch.flip(torch.cumsum(torch.flip(p, [0]), 0), [0])  # P(n >= k+1), k = 0..N-1
    lo, hi = 0.0, 1.0
    for _ in range(60):
        q = (lo + hi) / 2
        covered = 1.0 - float(torch.prod(1.0 - q * survive))
        lo, hi = (q, hi) if covered < target else (lo, q)
    return (lo + hi) / 2


def word_starts(
    special: torch.Tensor, word_ids: torch.Tensor | None = None, offsets: torch.Tensor | None = None
) -> torch.Tensor:
    """(B, L) bool: True where a new selectable unit (word, or token if no word info) begins.

    A token starts a word when it is not special and its word id differs from the previous
    token's (or, with offsets, its start is not the previous token's end), or the previous token
    is special. Word ids restarting at 0 in a second segment are thus handled.
    """
    prev_special = torch.ones_like(special)
    prev_special[:, 1:] = special[:, :-1]
    if word_ids is not None:
        prev = torch.full_like(word_ids, -2)
        prev[:, 1:] = word_ids[:, :-1]
        new = word_ids != prev
    elif offsets is not None:
        prev_end = torch.full_like(offsets[..., 1], -1)
        prev_end[:, 1:] = offsets[:, :-1, 1]
        new = offsets[..., 0] != prev_end
    else:
        new = torch.ones_like(special)
    return ~special & (new | prev_special)


def sample_units(
    starts: torch.Tensor, rate: float, max_ngram: int, generator: torch.Generator | None
) -> torch.Tensor:
    """Select units (words/tokens) and expand the selection to all their tokens.

    starts: (B, L) bool, True at the first token of each unit. Returns (B, L) bool selection.
    Spans never cross rows; they may run over a special token into the next segment (ALBERT does).
    """
    B, L = starts.shape
    unit_of_token = torch.cumsum(starts.reshape(-1), 0) - 1  # (B*L,) global unit index
    num_units = int(unit_of_token[-1]) + 1 if unit_of_token.numel() else 0
    if num_units <= 0:
        return torch.zeros_like(starts)
    unit_row = torch.nonzero(starts.reshape(-1)).flatten() // L  # (U,)
    q = span_start_rate(rate, max_ngram)
    chosen = torch.rand(num_units, generator=generator) < q  # (U,)
    if max_ngram > 1:
        n = torch.multinomial(ngram_probs(max_ngram).float(), num_units, replacement=True, generator=generator) + 1
        first = torch.nonzero(chosen).flatten()
        covered = torch.zeros(num_units, dtype=torch.bool)
        for k in range(max_ngram):  # per span length, not per token
            src = first[n[first] > k]
            dst = src + k
            ok = dst < num_units
            src, dst = src[ok], dst[ok]
            dst = dst[unit_row[dst] == unit_row[src]]
            covered[dst] = True
        chosen = covered
    return chosen[unit_of_token.clamp(min=0)].reshape(B, L)


def pick_one_unit(starts: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """(B, L) bool selecting the tokens of one unit (word/token) drawn uniformly; all False if there is none.

    starts: (B, L) bool, True at the first token of each unit; a unit runs to the next start (the
    caller removes the special tokens it runs over).
    """
    unit_of_token = torch.cumsum(starts.reshape(-1), 0) - 1  # (B*L,) global unit index
    num_units = int(unit_of_token[-1]) + 1 if unit_of_token.numel() else 0
    if num_units <= 0:
        return torch.zeros_like(starts)
    k = torch.randint(num_units, (1,), generator=generator)
    return (unit_of_token == k).reshape(starts.shape)


@dataclass
class DataCollatorForMLM(SeededMixin):
    """Pads a batch and applies BERT-style masking.

    Args:
        tokenizer: a (fast) tokenizer with a mask and a pad token.
        mlm_probability: fraction of (non-special) tokens to predict: 0.15 BERT, 0.30 ModernBERT.
        mask_replace_prob / random_replace_prob: of the selected tokens, the share replaced by the
            mask token / by a random non-special token; the rest keep their id (80/10/10).
        whole_word_mask: select whole words; needs `word_ids` (see `tokenize_for_mlm`) or
            `offset_mapping` in the examples.
        max_ngram: >1 selects spans of 1..max_ngram units with p(n) ∝ 1/n (ALBERT uses 3).
        pad_to_multiple_of: round the padded length up (8 helps tensor cores).
        return_cu_seqlens: for packed rows (with `position_ids`, or `seq_lens`: the lengths of the sequences of
            each row), also return varlen `cu_seqlens` and `max_seqlen`.
        num_threads: torch intra-op threads while collating (1: fastest for batch-sized work);
            None leaves torch's setting alone.
        seed / generator: reproducible masks (see `SeededMixin`).

    Examples are dicts with `input_ids` and optionally `attention_mask`, `token_type_ids`,
    `special_tokens_mask`, `word_ids`, `offset_mapping`, `position_ids` (packed rows; with
    `return_cu_seqlens=True` also `cu_seqlens`/`max_seqlen`) and scalar labels such as `sentence_order_label`,
    which are passed through. Bare id lists are accepted too.

    Returns input_ids, attention_mask, labels (B, L) [+ token_type_ids, position_ids, ...].

    Every batch with at least one maskable token has at least one target: when the random selection
    picks nothing (likely for a few short rows), one random unit is selected instead, so the loss is
    always defined. A batch made only of special and pad tokens has all labels -100; hf_xfmr's models
    give it a loss of 0 (transformers' give NaN). Empty examples raise a ValueError.
    """

    tokenizer: object
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_mask: bool = False
    max_ngram: int = 1
    pad_to_multiple_of: int | None = None
    return_cu_seqlens: bool = False
    num_threads: int | None = 1
    seed: int | None = None
    generator: torch.Generator | None = None

    def __post_init__(self):
        if not 0.0 < self.mlm_probability <= 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1], got {self.mlm_probability} (BERT uses 0.15).")
        if min(self.mask_replace_prob, self.random_replace_prob) < 0 or (
            self.mask_replace_prob + self.random_replace_prob > 1.0 + 1e-9
        ):
            raise ValueError(
                "mask_replace_prob and random_replace_prob must be >= 0 and sum to at most 1 "
                f"(got {self.mask_replace_prob} + {self.random_replace_prob}); BERT uses 0.8 and 0.1."
            )
        if self.max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {self.max_ngram} (ALBERT uses 3, plain BERT 1).")
        self.mask_token_id = require_token(self.tokenizer, "mask_token", "Masked language modelling")
        self.pad_token_id = require_token(self.tokenizer, "pad_token", "Batching sequences of different lengths")
        self.special_ids = special_ids_tensor(self.tokenizer)
        vocab = torch.arange(len(self.tokenizer))
        self.random_ids = vocab[~torch.isin(vocab, self.special_ids)]  # random replacements: no specials
        self.left_pad = getattr(self.tokenizer, "padding_side", "right") == "left"

    def __call__(self, examples) -> dict[str, torch.Tensor]:
        with intra_op_threads(self.num_threads):
            return self._collate(examples)

    def _collate(self, examples) -> dict[str, torch.Tensor]:
        cols = read_features(examples)
        input_ids, real = pad_ragged(
            cols["input_ids"], self.pad_token_id, left=self.left_pad, pad_to_multiple_of=self.pad_to_multiple_of
        )  # (B, L)
        L = input_ids.shape[1]
        special = ~real | torch.isin(input_ids, self.special_ids)
        if "special_tokens_mask" in cols:
            given, _ = pad_ragged(cols["special_tokens_mask"], 1, length=L, left=self.left_pad)
            special |= given.bool()
        batch = {"input_ids": input_ids, "attention_mask": real.long()}
        if "attention_mask" in cols:  # honour a given mask (it may hide more than padding)
            given, _ = pad_ragged(cols["attention_mask"], 0, length=L, left=self.left_pad)
            batch["attention_mask"] = given * real
            special |= given == 0
        labels_in, mask = self.mask_tokens(input_ids, special, cols, L)
        batch["input_ids"], batch["labels"] = labels_in, mask
        if "token_type_ids" in cols:
            batch["token_type_ids"], _ = pad_ragged(cols["token_type_ids"], 0, length=L, left=self.left_pad)
        if "position_ids" in cols:
            batch["position_ids"], _ = pad_ragged(cols["position_ids"], 0, length=L, left=self.left_pad)
            if self.return_cu_seqlens:
                batch["cu_seqlens"], batch["max_seqlen"] = cu_seqlens_from_positions(batch["position_ids"], real)
        elif self.return_cu_seqlens and "seq_lens" in cols:  # packed rows without positions: their lengths
            lengths = [n for row in cols["seq_lens"] for n in row]
            batch["cu_seqlens"], batch["max_seqlen"] = cu_seqlens_from_lengths(lengths)
        handled = {"input_ids", "attention_mask", "special_tokens_mask", "token_type_ids", "position_ids",
                   "word_ids", "offset_mapping", "labels", "length", "seq_lens", "doc_index"}
        batch.update(collate_extra(cols, handled, real, self.left_pad))
        return batch

    def mask_tokens(self, input_ids, special, cols, L) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (masked input_ids, labels). `special` (B, L) marks positions never selected."""
        g = self._rng()
        word_ids = offsets = None
        if self.whole_word_mask:
            if "word_ids" in cols:
                word_ids = pad_word_ids(cols["word_ids"], L, self.left_pad)
            elif "offset_mapping" in cols:
                offsets = torch.zeros(input_ids.shape + (2,), dtype=torch.long)
                rows = [torch.as_tensor(o, dtype=torch.long).reshape(-1, 2) for o in cols["offset_mapping"]]
                for b, o in enumerate(rows):  # one copy per example
                    if self.left_pad:
                        offsets[b, L - o.shape[0]:] = o
                    else:
                        offsets[b, : o.shape[0]] = o
            else:
                raise ValueError(
                    "whole_word_mask=True needs word boundaries: give each example a 'word_ids' list "
                    "(hf_xfmr.data.tokenize_for_mlm adds it) or an 'offset_mapping' "
                    "(tokenize with return_offsets_mapping=True, fast tokenizer). With Trainer, also pass "
                    "TrainingArguments(remove_unused_columns=False), which otherwise drops these columns."
                )
        starts = word_starts(special, word_ids, offsets)
        selected = sample_units(starts, self.mlm_probability, self.max_ngram, g) & ~special  # (B, L)
        if not selected.any():  # a short batch can draw no target at all: predict one random unit instead
            selected = pick_one_unit(starts, g) & ~special
        labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        # One uniform draw splits the selection into mask / random / keep.
        u = torch.rand(input_ids.shape, generator=g)
        to_mask = selected & (u < self.mask_replace_prob)
        to_random = selected & ~to_mask & (u < self.mask_replace_prob + self.random_replace_prob)
        out = input_ids.clone()
        out[to_mask] = self.mask_token_id
        n_random = int(to_random.sum())
        if n_random:
            pick = torch.randint(len(self.random_ids), (n_random,), generator=g)
            out[to_random] = self.random_ids[pick]
        return out, labels


def tokenize_for_mlm(tokenizer, texts, max_length: int | None = None, **kwargs) -> dict[str, list]:
    """Tokenize `texts` with special tokens and keep `word_ids` (-1 for special tokens).

    Suitable for `dataset.map(lambda b: tokenize_for_mlm(tok, b['text'], 128), batched=True)`;
    the result feeds `DataCollatorForMLM(whole_word_mask=True)`.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("Whole-word information needs a fast tokenizer (PreTrainedTokenizerFast).")
    enc = tokenizer(list(texts), truncation=max_length is not None, max_length=max_length,
                    return_special_tokens_mask=True, **kwargs)
    word_ids = []
    for i in range(len(enc["input_ids"])):
        word_ids.append([-1 if w is None else w for w in enc.word_ids(i)])
    out = {k: v for k, v in enc.items()}
    out["word_ids"] = word_ids
    return out
