"""PEGASUS gap-sentence generation (Zhang et al., 2020, "PEGASUS: Pre-training with Extracted Gap-sentences for
Abstractive Summarization", sec. 3.1): the most important sentences of a document are each replaced by ONE mask
token in the input, and the decoder generates them, in document order: a summary-like target from the rest.

    sentences : s1  s2  s3  s4  s5  s6  s7            ratio 0.3: m = round(0.3 * 7) = 2 gap sentences
    scores    : .2  .5  .1  .4  .3  .1  .2            ROUGE-1 F1 of each sentence against the other six
    input_ids : <s> s1 <mask> s3 <mask> s5 s6 s7 </s>  the top m (s2, s4) replaced by one mask each
    labels    : <s> s2 s4 </s>                         the gap sentences in document order (no separator)

Selection (`strategy`, the paper's names; sec. 3.1 and 6.1.2):
- "ind-orig" (default, PEGASUS's choice): each sentence scored independently by ROUGE-1 F1 against the rest of
  its document; the m best are chosen (ties: the earlier sentence).
- "seq-orig": greedy; m times, the sentence that maximises ROUGE-1 F1 between the chosen set plus it and the
  sentences left is added.
- "ind-uniq" / "seq-uniq": the same with unigrams counted as sets (each distinct unigram once).
- "random": m sentences uniformly at random (the collator's seeded generator); "lead": the first m.

Counts: m = round(ratio * n) for a document of n sentences (numpy's rounding, halves to even), at least 1 when
n >= 2 and at most n. A one-sentence row at a ratio below 0.5 keeps its text and has an empty target (EOS
alone); `gsg_examples` never builds such rows. Each gap sentence becomes its own mask, adjacent ones included.

ROUGE-1 on token ids: every id stands for its text (the id decoded alone) lowercased with all but letters and
digits removed, so "ĠThe", "the" and "The" are one unigram, and punctuation, white space and special tokens are
none (`rouge_units`). Deviation from the paper (rouge_score on words): the unigrams are subword pieces, so a word
split into pieces counts as several. F1 = 2 * overlap / (|candidate| + |reference|), overlap = sum over unigrams
of min(count in candidate, count in reference); 0 without overlap. For the "orig" strategies the denominator is
the document's unigram count, the same for every candidate.

Sentences (`sentence_spans`): a sentence ends at ".", "!" or "?" followed by white space and a capital, digit,
quote or opening bracket, and at every line break (paragraphs, list items). `tokenize_sentences` tokenizes each
document once and cuts the ids at the sentence boundaries (by character offsets), so a sentence has the ids it has
in its document (its leading-space form included) in the input and in the target alike.

Length (`gsg_examples`): a document is cut into windows of consecutive WHOLE sentences of at most `max_tokens`
tokens (the collator adds <s> / </s>); gap sentences are chosen within a window, scored against the rest of that
window. A single sentence longer than `max_tokens` is cut into pieces of `max_tokens` tokens, each then counted as
a sentence (the only place a sentence is split). Windows of fewer than 2 sentences are dropped. Since a masked
input is never longer than its text, neither input nor target exceeds `max_tokens` + 2.

Not done: the paper's MLM on the remaining tokens (sec. 3.2, left out of PEGASUS-large as well) and
PEGASUS-large's "mixed & stochastic" variant (ratio drawn in [15%, 45%], scores with 20% noise).

Vectorised over the batch in numpy: the (row, sentence, unigram) counts come from two `np.unique` calls over the
batch's tokens (sparse: no (B, vocabulary) table), the scores of all sentences from `np.bincount` sums over those
triples (no sentence x sentence loop); "seq" loops m times over the whole batch. About 6 ms for 32 rows of 512
tokens ("ind-orig", one CPU thread). Shapes: B rows, L tokens, S sentences, D distinct (row, unigram) pairs of the
batch, K (row, sentence, unigram) triples.
"""

import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from .collation import IGNORE_INDEX, SeededMixin, numpy_rng, pad_ragged_numpy, read_features

STRATEGIES = ("ind-orig", "ind-uniq", "seq-orig", "seq-uniq", "random", "lead")
GSG_RATIO = 0.3  # PEGASUS's gap-sentence ratio (sec. 6.1.2: 30% is best on most downstream tasks)
GSG_STRATEGY = "ind-orig"

_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])|\s*\n\s*")


def check_gsg_settings(gsg_ratio, strategy) -> None:
    """A ValueError saying what is wrong with a gap-sentence ratio or strategy."""
    if isinstance(gsg_ratio, bool) or not isinstance(gsg_ratio, (int, float)) or not 0.0 < gsg_ratio < 1.0:
        raise ValueError(f"gsg_ratio={gsg_ratio!r} must lie in (0, 1): the share of each document's sentences "
                         f"masked and generated (PEGASUS: 0.3).")
    _check_strategy(strategy)


def _check_strategy(strategy) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"Unknown gap-sentence strategy {strategy!r}; choose one of {', '.join(STRATEGIES)} "
                         f"(PEGASUS: ind-orig).")


# ----------------------------------------------------------------------------------------------
# Text -> sentences -> windows
# ----------------------------------------------------------------------------------------------

def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of `text`, without surrounding white space (the rule is in
    the module docstring)."""
    spans, start = [], 0
    for match in [*_BOUNDARY.finditer(text), None]:
        end = len(text) if match is None else match.start()
        piece = text[start:end]
        left = len(piece) - len(piece.lstrip())
        right = len(piece.rstrip())
        if right > left:
            spans.append((start + left, start + right))
        if match is not None:
            start = match.end()
    return spans


def tokenize_sentences(tokenizer, texts: Sequence[str]) -> list[list[list[int]]]:
    """Each document as the token ids of its sentences (no special tokens): the document is tokenized whole and
    its ids cut where a token ends in the next sentence (character offsets; white space between sentences stays
    with the sentence before). A document without tokens gives an empty list. Needs a fast tokenizer."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("Gap-sentence examples cut documents at sentence boundaries by character offsets, which "
                         f"needs a fast tokenizer (PreTrainedTokenizerFast); got {type(tokenizer).__name__}.")
    texts = list(texts)
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    documents = []
    for text, ids, offsets in zip(texts, encoded["input_ids"], encoded["offset_mapping"]):
        spans = sentence_spans(text)
        if not ids or not spans:
            documents.append([])
            continue
        starts = np.array([start for start, _ in spans])  # (S,)
        last_char = np.array([max(end - 1, start) for start, end in offsets])  # (T,) a token belongs where it ends
        sentence = np.maximum(np.searchsorted(starts, last_char, side="right") - 1, 0)  # (T,)
        cuts = np.flatnonzero(np.diff(sentence)) + 1
        documents.append([piece.tolist() for piece in np.split(np.asarray(ids), cuts)])
    return documents


def gsg_examples(tokenizer, texts: Sequence[str], max_tokens: int) -> list[dict]:
    """Examples for `DataCollatorForGapSentences`: windows of consecutive whole sentences of one document, at most
    `max_tokens` tokens each, as {"input_ids": the window's ids, "sentence_lengths": its sentences' lengths}.
    A sentence longer than `max_tokens` is cut into pieces, each counted as a sentence; windows of fewer than
    two sentences are dropped (nothing to generate from the rest)."""
    if max_tokens < 2:
        raise ValueError(f"max_tokens={max_tokens}: a gap-sentence window needs room for two sentences of at least "
                         f"one token each.")
    examples = []

    def emit(window, lengths):
        if len(lengths) >= 2:
            examples.append({"input_ids": window, "sentence_lengths": lengths})

    for sentences in tokenize_sentences(tokenizer, texts):
        window, lengths = [], []
        for sentence in sentences:
            for start in range(0, len(sentence), max_tokens):
                piece = sentence[start:start + max_tokens]
                if lengths and len(window) + len(piece) > max_tokens:
                    emit(window, lengths)
                    window, lengths = [], []
                window.extend(piece)
                lengths.append(len(piece))
        emit(window, lengths)
    return examples


# ----------------------------------------------------------------------------------------------
# ROUGE-1 scores and selection
# ----------------------------------------------------------------------------------------------

def rouge_units(tokenizer) -> np.ndarray:
    """(V,) the ROUGE-1 unigram of every id of `tokenizer`'s vocabulary, -1 for none (special tokens, and pieces
    without a letter or digit): ids whose text is the same once lowercased and stripped of everything but letters
    and digits share a unigram."""
    # Each id decoded alone: its text without the tokenizer's markers (byte-level "Ġ", SentencePiece "▁", "##").
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=False,
                                   clean_up_tokenization_spaces=False)
    special = set(int(i) for i in getattr(tokenizer, "all_special_ids", []))
    keys: dict[str, int] = {}
    units = np.full(len(texts), -1, dtype=np.int64)
    for token_id, text in enumerate(texts):
        key = "".join(ch for ch in text.lower() if ch.isalnum())
        if key and token_id not in special:
            units[token_id] = keys.setdefault(key, len(keys))
    return units


def sentence_mask_id(tokenizer) -> int | None:
    """The id that stands for a gap sentence: the tokenizer's sentence mask where it has one (PEGASUS's `<mask_1>`,
    its `mask_token_sent`; its `mask_token` `<mask_2>` masks words), else its mask token (None without either)."""
    if tokenizer is None:
        return None
    token = (getattr(tokenizer, "init_kwargs", None) or {}).get("mask_token_sent")
    if token is not None:
        token_id = tokenizer.convert_tokens_to_ids(str(token))
        if token_id is not None and token_id != tokenizer.unk_token_id:
            return int(token_id)
    return tokenizer.mask_token_id


def gap_counts(num_sentences: np.ndarray, gsg_ratio: float) -> np.ndarray:
    """(B,) gap sentences per row: round(ratio * n), at least 1 when n >= 2, at most n."""
    m = np.rint(num_sentences * gsg_ratio).astype(np.int64)
    return np.minimum(np.where(num_sentences >= 2, np.maximum(m, 1), m), num_sentences)


class _Counts(NamedTuple):
    """The unigram counts of a batch, sparse: K (row, sentence, unigram) triples with their counts, each naming
    its (row, unigram) pair; D pairs with the row's total count of the unigram."""

    sentence: np.ndarray  # (K,)
    pair: np.ndarray  # (K,) in [0, D)
    count: np.ndarray  # (K,)
    row: np.ndarray  # (K,)
    pair_row: np.ndarray  # (D,)
    totals: np.ndarray  # (D,)
    shape: tuple[int, int]  # (B, S)


def _unit_counts(units: np.ndarray, sentence: np.ndarray, num_sentences: np.ndarray) -> _Counts:
    """units (B, L): unigram per token (-1: none, padding included); sentence (B, L): sentence per token."""
    batch, width = int(len(num_sentences)), max(int(num_sentences.max()), 1)
    rows, cols = np.nonzero(units >= 0)  # (N,) the tokens that are unigrams
    unit = units[rows, cols]
    span = int(unit.max(initial=0)) + 1
    pairs, pair_of_token = np.unique(rows * span + unit, return_inverse=True)  # (D,), (N,)
    keys, count = np.unique(pair_of_token.reshape(-1) * width + sentence[rows, cols], return_counts=True)  # (K,)
    pair, sent = np.divmod(keys, width)
    pair_row = pairs // span
    totals = np.bincount(pair, weights=count, minlength=len(pairs)).astype(np.int64)  # (D,)
    return _Counts(sent, pair, count, pair_row[pair], pair_row, totals, (batch, width))


def _f1_adding_each(counts: _Counts, chosen: np.ndarray, uniq: bool) -> np.ndarray:
    """(B, S) ROUGE-1 F1 between (the `chosen` (D,) unigram counts + sentence s) and (the rest of the row).

    Only the unigrams of sentence s change between the candidates, so each score is the row's base value plus a
    sum over s's triples: one bincount per term. `uniq` clips every count to 1 (unigram sets)."""
    def f(x):
        return np.minimum(x, 1) if uniq else x

    batch, width = counts.shape
    rest = counts.totals - chosen  # (D,)
    base_overlap = np.bincount(counts.pair_row, weights=np.minimum(f(chosen), f(rest)), minlength=batch)  # (B,)
    base_length = np.bincount(counts.pair_row, weights=f(chosen) + f(rest), minlength=batch)  # (B,)
    a, r, k = chosen[counts.pair], rest[counts.pair], counts.count  # (K,)
    flat = counts.row * width + counts.sentence

    def per_sentence(delta):  # (K,) -> (B, S) sums
        return np.bincount(flat, weights=delta, minlength=batch * width).reshape(batch, width)

    overlap = base_overlap[:, None] + per_sentence(np.minimum(f(a + k), f(r - k)) - np.minimum(f(a), f(r)))
    length = base_length[:, None] + per_sentence(f(a + k) - f(a) + f(r - k) - f(r))
    return np.where(overlap > 0, 2.0 * overlap / np.maximum(length, 1), 0.0)


def sentence_scores(units: np.ndarray, sentence: np.ndarray, num_sentences: np.ndarray,
                    uniq: bool = False) -> np.ndarray:
    """(B, S) ROUGE-1 F1 of each sentence against the rest of its row (the "ind" scores; 0 past a row's end).

    units (B, L): each token's unigram (-1: none, padding included); sentence (B, L): each token's sentence."""
    counts = _unit_counts(units, sentence, num_sentences)
    return _f1_adding_each(counts, np.zeros_like(counts.totals), uniq)


def _top(scores: np.ndarray, exists: np.ndarray, num_gaps: np.ndarray) -> np.ndarray:
    """(B, S) bool: the num_gaps highest scores of each row among existing sentences (ties: the earlier one)."""
    batch, width = scores.shape
    keys = np.where(exists, -scores, np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(width), (batch, width)), keys), axis=1)  # by score, then position
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(width), (batch, width)), axis=1)
    return (rank < num_gaps[:, None]) & exists


def _greedy(counts: _Counts, exists: np.ndarray, num_gaps: np.ndarray, uniq: bool) -> np.ndarray:
    """The "seq" strategies: m times, add the sentence whose addition maximises the F1 of the chosen set against
    the rest (ties: the earlier sentence)."""
    chosen = np.zeros_like(counts.totals)  # (D,)
    selected = np.zeros(counts.shape, dtype=bool)  # (B, S)
    for step in range(int(num_gaps.max(initial=0))):
        active = np.flatnonzero(step < num_gaps)
        scores = np.where(exists & ~selected, _f1_adding_each(counts, chosen, uniq), -np.inf)
        pick = scores.argmax(1)  # (B,)
        selected[active, pick[active]] = True
        take = (step < num_gaps)[counts.row] & (counts.sentence == pick[counts.row])
        chosen += np.bincount(counts.pair[take], weights=counts.count[take], minlength=len(chosen)).astype(np.int64)
    return selected


def select_gap_sentences(units: np.ndarray, sentence: np.ndarray, num_sentences: np.ndarray, num_gaps: np.ndarray,
                         strategy: str = GSG_STRATEGY, rng: np.random.Generator | None = None) -> np.ndarray:
    """(B, S) bool: the gap sentences of each row under `strategy` (see the module docstring).

    units / sentence (B, L) as for `sentence_scores`; num_sentences, num_gaps (B,); rng for "random"."""
    _check_strategy(strategy)
    width = max(int(num_sentences.max()), 1)
    position = np.arange(width)[None]  # (1, S)
    exists = position < num_sentences[:, None]  # (B, S)
    if strategy == "lead":
        return position < num_gaps[:, None]
    if strategy == "random":
        rng = rng if rng is not None else np.random.default_rng()
        return _top(rng.random(exists.shape), exists, num_gaps)
    counts = _unit_counts(units, sentence, num_sentences)
    uniq = strategy.endswith("uniq")
    if strategy.startswith("ind"):
        return _top(_f1_adding_each(counts, np.zeros_like(counts.totals), uniq), exists, num_gaps)
    return _greedy(counts, exists, num_gaps, uniq)


# ----------------------------------------------------------------------------------------------
# The collator
# ----------------------------------------------------------------------------------------------

def _sentence_index(sentence_lengths: np.ndarray, width: int) -> np.ndarray:
    """(B, S) sentence lengths (0-padded) -> (B, L) the sentence of every position (the last one past the end)."""
    starts = np.cumsum(sentence_lengths, 1) - sentence_lengths  # (B, S)
    rows, cols = np.nonzero(sentence_lengths[:, 1:] > 0)
    boundary = np.zeros((len(sentence_lengths), width + 1), dtype=np.int64)
    boundary[rows, starts[rows, cols + 1]] = 1  # lengths >= 1: distinct starts
    return boundary[:, :width].cumsum(1)


def _frame(values: np.ndarray, keep: np.ndarray, bos: int | None, eos: int, pad: int,
           separator_before: np.ndarray | None = None, separator: int | None = None):
    """[bos] + the kept (B, L) values of each row, in order (with `separator` inserted before the marked
    positions) + [eos], padded with `pad` -> ((B, N) ids, (B, N) 0/1 mask)."""
    batch = len(values)
    front = 0 if bos is None else 1
    slots = keep.astype(np.int64) + (0 if separator_before is None else separator_before)  # (B, L)
    place = slots.cumsum(1) - 1 + front  # (B, L): where each kept value goes
    total = slots.sum(1) + front + 1  # (B,)
    out = np.full((batch, int(total.max())), pad, dtype=np.int64)
    if bos is not None:
        out[:, 0] = bos
    rows, cols = np.nonzero(keep)
    out[rows, place[rows, cols]] = values[rows, cols]
    if separator_before is not None:
        rows, cols = np.nonzero(separator_before)
        out[rows, place[rows, cols] - 1] = separator
    out[np.arange(batch), total - 1] = eos
    mask = (np.arange(out.shape[1])[None] < total[:, None]).astype(np.int64)
    return out, mask


class DataCollatorForGapSentences(SeededMixin):
    """Examples of sentences (`gsg_examples`) -> `input_ids`, `attention_mask`, `labels` for gap-sentence
    generation (PEGASUS), for any encoder-decoder.

    Args:
        tokenizer: gives the mask id (`sentence_mask_id`: PEGASUS's sentence mask `<mask_1>` where the tokenizer
            has one, else its `mask_token_id`), `pad_token_id`, `eos_token_id`, `bos_token_id` (optional) and the
            ROUGE unigram of every id (`rouge_units`); the mask id must be a special token.
        gsg_ratio: share of each row's sentences masked and generated, in (0, 1) (PEGASUS: 0.3).
        strategy: how gap sentences are chosen, one of `STRATEGIES` (default "ind-orig", PEGASUS's).
        target_separator_id: a token put between consecutive gap sentences in the target (default none: the
            sentences follow each other as in the document, as PEGASUS's targets do).
        units: (V,) unigram of every id (-1: none) instead of the tokenizer's; without either, the ids are the
            unigrams (the special ids excluded).
        mask_token_id / pad_token_id / eos_token_id / bos_token_id: override the tokenizer's (or replace it).
        seed / generator: reproducible draws for "random" (see `SeededMixin`); the other strategies are
            deterministic.

    Each example holds `input_ids` (text ids, no special tokens) and `sentence_lengths` (its sentences' token
    counts, summing to len(input_ids)). Output: `input_ids` = [bos] + the text with each gap sentence replaced by
    one mask + [eos], padded with the pad id; `labels` = [bos] + the gap sentences in document order + [eos],
    padded with -100 (the decoder reads them shifted right, from the decoder start id).
    """

    def __init__(self, tokenizer=None, *, gsg_ratio: float = GSG_RATIO, strategy: str = GSG_STRATEGY,
                 target_separator_id: int | None = None, units=None, mask_token_id: int | None = None,
                 pad_token_id: int | None = None, eos_token_id: int | None = None, bos_token_id: int | None = None,
                 seed: int | None = None, generator: torch.Generator | None = None):
        check_gsg_settings(gsg_ratio, strategy)
        self.gsg_ratio, self.strategy = float(gsg_ratio), strategy

        def pick(value, name):
            return value if value is not None else getattr(tokenizer, name, None)
        self.mask_token_id = mask_token_id if mask_token_id is not None else sentence_mask_id(tokenizer)
        self.pad_token_id = pick(pad_token_id, "pad_token_id")
        self.eos_token_id = pick(eos_token_id, "eos_token_id")
        self.bos_token_id = pick(bos_token_id, "bos_token_id")
        for name in ("mask_token_id", "pad_token_id", "eos_token_id"):
            if getattr(self, name) is None:
                raise ValueError(f"Gap-sentence generation needs `{name}`: pass a tokenizer that has it or `{name}=`.")
        if tokenizer is not None:
            special = set(int(i) for i in getattr(tokenizer, "all_special_ids", []))
            if self.mask_token_id not in special or self.mask_token_id in (self.pad_token_id, self.eos_token_id):
                token = tokenizer.convert_ids_to_tokens(int(self.mask_token_id))
                raise ValueError(
                    f"mask_token_id={self.mask_token_id} is the vocabulary entry {token!r}, not a special mask token "
                    f"of its own: it would stand for real text. Use a tokenizer with a mask special token "
                    f"(hf_xfmr.data.train_tokenizer('bart')) or pass mask_token_id= the id of one.")
        self.target_separator_id = target_separator_id
        self.units = np.asarray(units, dtype=np.int64) if units is not None else (
            rouge_units(tokenizer) if tokenizer is not None else None)
        self.seed, self.generator = seed, generator

    def _units_of(self, ids: np.ndarray, real: np.ndarray) -> np.ndarray:
        """(B, L) the ROUGE unigram of every token, -1 for none and for padding."""
        if self.units is None:
            specials = [i for i in (self.mask_token_id, self.pad_token_id, self.eos_token_id, self.bos_token_id)
                        if i is not None]
            units = np.where(np.isin(ids, specials), -1, ids)
        else:
            if int(ids.max()) >= len(self.units) or int(ids.min()) < 0:
                raise ValueError(f"Token ids must lie in [0, {len(self.units)}) (the tokenizer's vocabulary); got "
                                 f"ids from {int(ids.min())} to {int(ids.max())}.")
            units = self.units[ids]
        return np.where(real, units, -1)

    def _sentences(self, columns: dict, lengths: np.ndarray) -> np.ndarray:
        """The (B, S) sentence lengths, 0-padded, checked against the rows."""
        if "sentence_lengths" not in columns:
            raise ValueError("Gap-sentence examples need `sentence_lengths` (each sentence's token count) beside "
                             "`input_ids`: build them with hf_xfmr.data.gsg.gsg_examples(tokenizer, texts, "
                             "max_tokens).")
        sizes, _ = pad_ragged_numpy(columns["sentence_lengths"], 0)  # (B, S)
        sums = sizes.sum(1)
        bad = np.flatnonzero((sums != lengths) | (sizes < 0).any(1))
        if bad.size:
            row = int(bad[0])
            raise ValueError(f"Example {row}: its sentence_lengths sum to {int(sums[row])} but it has "
                             f"{int(lengths[row])} input_ids (and none may be negative); each token belongs to one "
                             f"sentence.")
        return sizes

    def __call__(self, examples):
        columns = read_features(examples)
        ids, real = pad_ragged_numpy(columns["input_ids"], self.pad_token_id)  # (B, L)
        sizes = self._sentences(columns, real.sum(1))  # (B, S)
        sizes_real = sizes > 0
        # Sentences are runs of positive lengths; a 0 inside a row would shift the ones after it.
        num_sentences = sizes_real.sum(1)  # (B,)
        if (sizes_real != (np.arange(sizes.shape[1])[None] < num_sentences[:, None])).any():
            raise ValueError("sentence_lengths must be positive: drop empty sentences from the examples.")
        sentence = _sentence_index(sizes, ids.shape[1])  # (B, L)
        num_gaps = gap_counts(num_sentences, self.gsg_ratio)  # (B,)
        selected = select_gap_sentences(self._units_of(ids, real), sentence, num_sentences, num_gaps, self.strategy,
                                        numpy_rng(self._rng()) if self.strategy == "random" else None)  # (B, S)
        return self.mask_sentences(ids, real, sentence, selected)

    def mask_sentences(self, ids: np.ndarray, real: np.ndarray, sentence: np.ndarray, selected: np.ndarray) -> dict:
        """The batch for (B, L) ids whose (B, S) `selected` sentences are the gaps."""
        in_gap = np.take_along_axis(selected, np.minimum(sentence, selected.shape[1] - 1), axis=1) & real  # (B, L)
        first = real.copy()
        first[:, 1:] &= sentence[:, 1:] != sentence[:, :-1]  # (B, L): first token of each sentence
        input_ids, attention_mask = _frame(np.where(in_gap, self.mask_token_id, ids), real & (~in_gap | first),
                                           self.bos_token_id, self.eos_token_id, self.pad_token_id)
        separator_before = None
        if self.target_separator_id is not None:
            gap_start = first & in_gap
            separator_before = (gap_start & (gap_start.cumsum(1) > 1)).astype(np.int64)  # before all but the first
        labels, _ = _frame(ids, in_gap, self.bos_token_id, self.eos_token_id, IGNORE_INDEX, separator_before,
                           self.target_separator_id)
        return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention_mask),
                "labels": torch.from_numpy(labels)}
