"""BART text infilling (Lewis et al., 2020, sec. 2.2 and 5.1): spans of the text, with lengths drawn from
Poisson(λ = 3), are each replaced by ONE mask token, so the model must also work out how many tokens
are missing; a zero-length span inserts a mask without removing anything. 30% of the tokens are masked.
Optionally the sentences are shuffled first (sentence permutation). The target is the original text.

    text      : a  b  c  d  e  f  g  h  i  j
    spans     :    [c d e]      (0)   [h]           lengths 3, 0, 1: 4 masked tokens, 3 masks
    input_ids : <s> a  b  <mask>  f  <mask>  g  <mask>  i  j  </s>
    labels    : <s> a  b  c  d  e  f  g  h  i  j  </s>

Each row of L text tokens gets exactly m = round(L * mask_ratio) masked tokens (at least 1): span lengths
are drawn from the Poisson distribution until they sum to at least m, and the last one is cut so that
they sum to exactly m (fairseq's recipe). The spans are then placed uniformly at random among the
L - m kept tokens without overlapping: the corrupted row is a random interleaving of the kept tokens (in
order) and the spans (as masks), so its length is L - m + (number of spans). Spans may be adjacent.

Vectorised over the batch in numpy (small arrays; per-op overhead dominates): the Poisson draws, the
interleaving (random keys, one argsort), the gather of kept tokens, and the sentence shuffle (a random
key per sentence, one lexsort) are whole-batch operations. The numpy generator is seeded from torch's per
batch, so `seed=`, `generator=` and `torch.manual_seed` govern the corruption as in the other collators.

Shapes: B batch, L text tokens (longest row), K drawn spans per row, N = L - m + spans output slots.
"""

import numpy as np
import torch

from .collation import IGNORE_INDEX, SeededMixin, numpy_rng, pad_ragged_numpy, read_features


def check_infilling_settings(mask_ratio, poisson_lambda) -> None:
    if isinstance(mask_ratio, bool) or not isinstance(mask_ratio, (int, float)) or not 0.0 < mask_ratio < 1.0:
        raise ValueError(f"mask_ratio={mask_ratio!r} must lie in (0, 1): the share of tokens to mask (BART: 0.3).")
    if isinstance(poisson_lambda, bool) or not isinstance(poisson_lambda, (int, float)) or poisson_lambda <= 0:
        raise ValueError(f"poisson_lambda={poisson_lambda!r} must be a positive number: the mean span length "
                         f"(BART: 3).")


def masked_counts(lengths: np.ndarray, mask_ratio: float) -> np.ndarray:
    """(B,) tokens to mask per row: round(L * mask_ratio), at least 1."""
    return np.maximum(np.rint(lengths * mask_ratio).astype(np.int64), 1)


def _span_lengths(num_masked: np.ndarray, poisson_lambda: float, rng: np.random.Generator) -> np.ndarray:
    """(B, K) Poisson span lengths per row, summing to exactly `num_masked` over the first n_r entries and -1
    after them (unused). The last used span is cut to fit (it may become 0 only if it was drawn as 0)."""
    batch = len(num_masked)
    # Enough draws that the running sum reaches m with overwhelming probability; rows that do not are redrawn.
    draws = int(num_masked.max() / poisson_lambda * 1.5) + 8
    lengths = rng.poisson(poisson_lambda, (batch, draws))  # (B, K)
    short = lengths.sum(1) < num_masked
    while short.any():
        lengths[short] = rng.poisson(poisson_lambda, (int(short.sum()), draws))
        short = lengths.sum(1) < num_masked
    total = lengths.cumsum(1)  # (B, K)
    used = np.argmax(total >= num_masked[:, None], axis=1) + 1  # (B,) spans needed: first index reaching m, + 1
    index = np.arange(draws)[None]  # (1, K)
    last_index = (used - 1)[:, None]  # (B, 1)
    before = (np.take_along_axis(total, last_index, 1) - np.take_along_axis(lengths, last_index, 1))[:, 0]
    last = num_masked - before  # (B,) what is left for the last span
    lengths = np.where(index == (used - 1)[:, None], last[:, None], lengths)
    return np.where(index < used[:, None], lengths, -1)


def infill(ids: np.ndarray, lengths: np.ndarray, mask_ratio: float, poisson_lambda: float, mask_token_id: int,
           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(B, L) right-padded text ids with (B,) lengths -> ((B, N) corrupted ids, (B,) their lengths).

    Padding in the result is 0 (the caller pads); see the module docstring for the recipe."""
    batch, width = ids.shape
    num_masked = masked_counts(lengths, mask_ratio)  # (B,)
    spans = _span_lengths(num_masked, poisson_lambda, rng)  # (B, K), -1 = unused
    num_spans = (spans >= 0).sum(1)  # (B,)
    kept = lengths - num_masked  # (B,)
    slots = kept + num_spans  # (B,) output length
    n = int(slots.max())
    # A uniformly random interleaving: each row's slots get random keys; the num_spans smallest are spans.
    keys = rng.random((batch, n))
    keys[np.arange(n)[None] >= slots[:, None]] = 2.0  # past the row's end: never chosen, sorted last
    order = np.argsort(keys, axis=1)  # (B, N)
    is_span = np.zeros((batch, n), dtype=bool)
    np.put_along_axis(is_span, order, np.arange(n)[None] < num_spans[:, None], axis=1)  # (B, N)
    span_number = is_span.cumsum(1) - 1  # (B, N): which span a span slot is (in drawn order)
    span_len = np.take_along_axis(np.maximum(spans, 0), np.clip(span_number, 0, spans.shape[1] - 1), axis=1)
    slot_len = np.where(is_span, span_len, 1)  # (B, N) text tokens each slot stands for
    slot_len[np.arange(n)[None] >= slots[:, None]] = 0
    start = slot_len.cumsum(1) - slot_len  # (B, N) position in the text where each slot begins
    text = np.take_along_axis(ids, np.clip(start, 0, width - 1), axis=1)
    out = np.where(is_span, mask_token_id, text)
    out[np.arange(n)[None] >= slots[:, None]] = 0
    return out, slots


def permute_sentences(ids: np.ndarray, lengths: np.ndarray, sentence_end_ids: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
    """(B, L) right-padded ids -> the same tokens with each row's sentences in a random order. A sentence
    ends after a token of `sentence_end_ids` (or at the row's end); padding stays at the end."""
    batch, width = ids.shape
    real = np.arange(width)[None] < lengths[:, None]  # (B, L)
    ends = np.isin(ids, sentence_end_ids) & real
    sentence = np.zeros((batch, width), dtype=np.int64)
    sentence[:, 1:] = ends[:, :-1].cumsum(1)  # (B, L): sentence index of each token
    keys = rng.random((batch, width + 1))  # one random key per possible sentence
    key = np.take_along_axis(keys, sentence, axis=1)
    key[~real] = 2.0  # padding last
    order = np.lexsort((np.arange(width)[None].repeat(batch, 0), key), axis=1)  # by sentence key, then position
    return np.take_along_axis(ids, order, axis=1)


class DataCollatorForTextInfilling(SeededMixin):
    """Examples of raw text tokens (no special tokens) -> `input_ids`, `attention_mask`, `labels` for BART.

    Args:
        tokenizer: gives `mask_token_id`, `pad_token_id`, `eos_token_id`, `bos_token_id` (optional) and the
            special ids; the mask id must be a special token, never a real piece of text.
        mask_ratio: share of tokens masked, in (0, 1) (BART: 0.3).
        poisson_lambda: mean span length, > 0 (BART: 3).
        permute_sentences: shuffle each row's sentences before masking (BART's sentence permutation);
            needs `sentence_end_ids`.
        sentence_end_ids: ids that end a sentence (e.g. the ids of ".", "!", "?" in the tokenizer).
        mask_token_id / pad_token_id / eos_token_id / bos_token_id / vocab_size: override the tokenizer's
            (or replace it: no tokenizer).
        seed / generator: reproducible corruption (see `SeededMixin`); default torch's global RNG.

    Output: `input_ids` = [bos] + corrupted text + [eos], padded with the pad id; `labels` = [bos] + text +
    [eos], padded with -100 (the decoder reads them shifted right, starting from the decoder start id).
    """

    def __init__(self, tokenizer=None, *, mask_ratio: float = 0.3, poisson_lambda: float = 3.0,
                 permute_sentences: bool = False, sentence_end_ids=None, mask_token_id: int | None = None,
                 pad_token_id: int | None = None, eos_token_id: int | None = None, bos_token_id: int | None = None,
                 vocab_size: int | None = None, seed: int | None = None, generator: torch.Generator | None = None):
        check_infilling_settings(mask_ratio, poisson_lambda)
        self.mask_ratio, self.poisson_lambda = float(mask_ratio), float(poisson_lambda)

        def pick(value, name):
            return value if value is not None else getattr(tokenizer, name, None)
        self.mask_token_id = pick(mask_token_id, "mask_token_id")
        self.pad_token_id = pick(pad_token_id, "pad_token_id")
        self.eos_token_id = pick(eos_token_id, "eos_token_id")
        self.bos_token_id = pick(bos_token_id, "bos_token_id")
        self.vocab_size = vocab_size if vocab_size is not None else (len(tokenizer) if tokenizer is not None else None)
        for name in ("mask_token_id", "pad_token_id", "eos_token_id"):
            if getattr(self, name) is None:
                raise ValueError(f"Text infilling needs `{name}`: pass a tokenizer that has it or `{name}=`.")
        if self.vocab_size is not None and not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id={self.mask_token_id} is outside the vocabulary [0, {self.vocab_size}).")
        if tokenizer is not None:
            special = set(int(i) for i in getattr(tokenizer, "all_special_ids", []))
            if self.mask_token_id not in special or self.mask_token_id in (self.pad_token_id, self.eos_token_id):
                token = tokenizer.convert_ids_to_tokens(int(self.mask_token_id))
                raise ValueError(
                    f"mask_token_id={self.mask_token_id} is the real vocabulary entry {token!r}, not a special mask "
                    f"token: infilling would write it over text. Use a tokenizer with a <mask> special token "
                    f"(hf_xfmr.data.train_tokenizer('bart')) or pass mask_token_id= the id of one."
                )
        self.permute_sentences = bool(permute_sentences)
        if self.permute_sentences and not sentence_end_ids:
            raise ValueError("permute_sentences=True needs `sentence_end_ids`: the ids that end a sentence (e.g. "
                             "tokenizer.convert_tokens_to_ids(['.', '!', '?'])).")
        self.sentence_end_ids = np.asarray(sorted(set(sentence_end_ids or ())), dtype=np.int64)
        self.seed, self.generator = seed, generator

    def __call__(self, examples):
        columns = read_features(examples)
        rows = columns["input_ids"]
        ids, real = pad_ragged_numpy(rows, self.pad_token_id)  # (B, L)
        lengths = real.sum(1)  # (B,)
        if int(lengths.min()) < 2:
            row = int(np.argmin(lengths))
            raise ValueError(f"Example {row} has {int(lengths[row])} token(s): too short to corrupt, text infilling "
                             f"needs at least 2 (something masked, something kept). Drop shorter examples or join "
                             f"texts into longer rows.")
        rng = numpy_rng(self._rng())
        text = permute_sentences(ids, lengths, self.sentence_end_ids, rng) if self.permute_sentences else ids
        corrupted, corrupted_lengths = infill(text, lengths, self.mask_ratio, self.poisson_lambda, self.mask_token_id,
                                              rng)
        input_ids, attention_mask = _wrap(corrupted, corrupted_lengths, self.bos_token_id, self.eos_token_id,
                                          self.pad_token_id)
        labels, _ = _wrap(ids, lengths, self.bos_token_id, self.eos_token_id, IGNORE_INDEX)
        return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention_mask),
                "labels": torch.from_numpy(labels)}


def _wrap(ids: np.ndarray, lengths: np.ndarray, bos: int | None, eos: int, pad: int):
    """(B, L) right-padded rows -> ([bos] + row + [eos], padded with `pad`; the (B, L') 0/1 mask)."""
    batch, width = ids.shape
    front = 0 if bos is None else 1
    out = np.full((batch, width + front + 1), pad, dtype=np.int64)
    if bos is not None:
        out[:, 0] = bos
    position = np.arange(width)[None]
    out[:, front:front + width] = np.where(position < lengths[:, None], ids, pad)
    out[np.arange(batch), lengths + front] = eos
    total = lengths + front + 1
    mask = (np.arange(width + front + 1)[None] < total[:, None]).astype(np.int64)
    return out[:, :int(total.max())], mask[:, :int(total.max())]
