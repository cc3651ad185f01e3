"""T5 span corruption (Raffel et al., 2020, sec. 3.1.4 and 3.3.4): random spans of the text are
dropped from the input, each replaced by one sentinel token; the target lists the dropped spans, each
after its sentinel, then EOS.

    text      : a  b  c  d  e  f  g  h  i  j
    noise     :       ^  ^           ^
    input_ids : a  b  <X>  e  f  g  <Y>  j  </s>          (<X> = <extra_id_0>, <Y> = <extra_id_1>)
    labels    : <X>  c  d  <Y>  h  </s>

As in T5's `random_spans_noise_mask`, a row of L tokens gets exactly round(L * noise_density) noise
tokens in round(noise / mean_noise_span_length) spans, and every row starts with kept text and ends
with a noise span, so rows of one length corrupt into inputs and targets of one length each:
`compute_input_and_target_lengths(input_length)` gives the text length that yields a wanted input
length (T5: 568 tokens -> 512 inputs + 114 targets; 512 -> 462 + 104), and batches need no padding.
Sentinel ids count down from the end of the vocabulary (`<extra_id_0>` = vocab_size - 1, ...).

Vectorised over the batch (numpy: these arrays are small, and per-op overhead dominates): span lengths
come from partitioning random keys (a random composition of the noise / kept token counts into that
many positive parts), and inputs / targets are gathered with boolean masks; the only Python loop is
over distinct row lengths. The numpy generator is seeded from torch's per batch, so `seed=`,
`generator=` and `torch.manual_seed` govern the corruption as in the other collators.
"""

import numpy as np
import torch

from .collation import IGNORE_INDEX, SeededMixin, numpy_rng, pad_ragged_numpy, read_features


def _span_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """(noise tokens, noise spans) of a row of `length` tokens, as T5 computes them."""
    num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    num_spans = max(int(round(num_noise / mean_noise_span_length)), 1)
    return num_noise, num_spans


def corrupted_lengths(length: int, noise_density: float = 0.15, mean_noise_span_length: float = 3.0):
    """(input length, target length) of a row of `length` text tokens, EOS included in both."""
    num_noise, num_spans = _span_counts(length, noise_density, mean_noise_span_length)
    return length - num_noise + num_spans + 1, num_noise + num_spans + 1


def compute_input_and_target_lengths(input_length: int, noise_density: float = 0.15,
                                     mean_noise_span_length: float = 3.0) -> tuple[int, int]:
    """(text tokens per row, target length) so that corrupted rows have exactly `input_length` tokens
    at most (T5's `compute_input_and_target_lengths`: the longest text whose input still fits)."""
    _check_settings(noise_density, mean_noise_span_length)
    if input_length < 2:
        raise ValueError(f"input_length={input_length}: a corrupted input needs at least 2 tokens (text + EOS).")
    tokens = 2
    while corrupted_lengths(tokens + 1, noise_density, mean_noise_span_length)[0] <= input_length:
        tokens += 1
    return tokens, corrupted_lengths(tokens, noise_density, mean_noise_span_length)[1]


def _check_settings(noise_density, mean_noise_span_length):
    if not isinstance(noise_density, (int, float)) or not 0.0 < noise_density < 1.0:
        raise ValueError(f"noise_density={noise_density!r} must lie in (0, 1): the share of tokens to corrupt "
                         f"(T5: 0.15).")
    if not isinstance(mean_noise_span_length, (int, float)) or mean_noise_span_length < 1:
        raise ValueError(f"mean_noise_span_length={mean_noise_span_length!r} must be at least 1 token (T5: 3).")


def _random_composition(total: int, parts: int, batch: int, rng: np.random.Generator) -> np.ndarray:
    """(batch, parts) positive integers summing to `total` per row, uniformly over compositions
    (T5's `_random_segmentation`: parts - 1 distinct cut points among the total - 1 gaps)."""
    if parts == 1:
        return np.full((batch, 1), total, dtype=np.int64)
    keys = rng.random((batch, total - 1))  # (B, total - 1)
    cuts = np.sort(np.argpartition(keys, parts - 2, axis=1)[:, :parts - 1], axis=1) + 1  # (B, parts - 1) in [1, total)
    bounds = np.concatenate([np.zeros((batch, 1), np.int64), cuts, np.full((batch, 1), total)], axis=1)
    return np.diff(bounds, axis=1)  # (B, parts)


def _noise_mask(batch: int, length: int, noise_density: float, mean_noise_span_length: float,
                rng: np.random.Generator) -> np.ndarray:
    num_noise, num_spans = _span_counts(length, noise_density, mean_noise_span_length)
    noise_lengths = _random_composition(num_noise, num_spans, batch, rng)  # (B, S)
    kept_lengths = _random_composition(length - num_noise, num_spans, batch, rng)  # (B, S)
    interleaved = np.stack([kept_lengths, noise_lengths], axis=2).reshape(batch, 2 * num_spans)  # (B, 2S)
    span_starts = interleaved.cumsum(1)[:, :-1]  # (B, 2S - 1), all in [1, length)
    indicator = np.zeros((batch, length), dtype=np.int64)
    np.put_along_axis(indicator, span_starts, 1, axis=1)
    return indicator.cumsum(1) % 2 == 1  # odd span numbers are noise


def random_spans_noise_mask(batch: int, length: int, noise_density: float = 0.15,
                            mean_noise_span_length: float = 3.0, generator=None) -> torch.Tensor:
    """Bool (batch, length): which tokens are noise. Alternating kept / noise spans, kept first."""
    rng = numpy_rng(generator)
    return torch.from_numpy(_noise_mask(batch, length, noise_density, mean_noise_span_length, rng))


def _corrupt(ids: np.ndarray, noise: np.ndarray, sentinel_start: int, eos_token_id: int):
    batch = ids.shape[0]
    previous = np.zeros_like(noise)
    previous[:, 1:] = noise[:, :-1]  # noise of the token before (none before the first)
    noise_start = noise & ~previous  # first token of each noise span
    previous[:, 0] = True
    kept_start = ~noise & previous  # first token of each kept span (the row starts with one)
    span = noise_start.cumsum(1)  # (B, L): noise spans begun so far
    # noise span j (j + 1 begun) -> sentinel start - j in the input; the kept span before it (j begun) in the target
    inputs = np.where(noise_start, sentinel_start + 1 - span, ids)[~noise | noise_start].reshape(batch, -1)
    targets = np.where(kept_start, sentinel_start - span, ids)[noise | kept_start].reshape(batch, -1)
    eos = np.full((batch, 1), eos_token_id, dtype=ids.dtype)
    return np.concatenate([inputs, eos], axis=1), np.concatenate([targets, eos], axis=1)


def corrupt_spans(input_ids: torch.Tensor, noise: torch.Tensor, sentinel_start: int, eos_token_id: int):
    """(B, L) ids + (B, L) noise mask (as `random_spans_noise_mask` makes them) -> (inputs, targets).

    Noise span j becomes sentinel `sentinel_start - j` in the input; in the target, the kept span before
    it does. Every row must have the same number of noise tokens and spans (true for one length)."""
    inputs, targets = _corrupt(input_ids.numpy(), noise.numpy(), sentinel_start, eos_token_id)
    return torch.from_numpy(inputs), torch.from_numpy(targets)


class DataCollatorForSpanCorruption(SeededMixin):
    """Examples of raw text tokens (no EOS) -> `input_ids`, `attention_mask`, `labels` for T5.

    Args:
        tokenizer: gives `eos_token_id`, `pad_token_id` and the vocabulary size (`len(tokenizer)`); its
            last ids must be sentinel tokens (`<extra_id_N>`, as `train_tokenizer("t5")` makes them),
            else a ValueError says which real token a sentinel id would overwrite.
        noise_density: share of tokens corrupted, in (0, 1) (T5: 0.15).
        mean_noise_span_length: mean corrupted span length, >= 1 (T5: 3).
        vocab_size / eos_token_id / pad_token_id: override the tokenizer's (or replace it: no tokenizer).
        num_sentinels: how many ids at the end of the vocabulary are sentinels (default: the tokenizer's
            `<extra_id_*>` tokens, else 100); a row needing more spans raises.
        seed / generator: reproducible corruption (see `SeededMixin`); default torch's global RNG.

    Rows of one length (the pretraining examples are cut to `compute_input_and_target_lengths`) give
    batches without padding; rows of several lengths are corrupted per length and padded (labels -100).
    """

    def __init__(self, tokenizer=None, *, noise_density: float = 0.15, mean_noise_span_length: float = 3.0,
                 vocab_size: int | None = None, eos_token_id: int | None = None, pad_token_id: int | None = None,
                 num_sentinels: int | None = None, seed: int | None = None, generator: torch.Generator | None = None):
        _check_settings(noise_density, mean_noise_span_length)
        self.noise_density, self.mean_noise_span_length = float(noise_density), float(mean_noise_span_length)
        self.vocab_size = vocab_size if vocab_size is not None else (len(tokenizer) if tokenizer is not None else None)
        self.eos_token_id = eos_token_id if eos_token_id is not None else getattr(tokenizer, "eos_token_id", None)
        self.pad_token_id = pad_token_id if pad_token_id is not None else getattr(tokenizer, "pad_token_id", None)
        for name in ("vocab_size", "eos_token_id", "pad_token_id"):
            if getattr(self, name) is None:
                raise ValueError(f"Span corruption needs `{name}`: pass a tokenizer that has it or `{name}=`.")
        self.num_sentinels = num_sentinels if num_sentinels is not None else _count_sentinels(tokenizer)
        if self.num_sentinels < 1 or self.num_sentinels >= self.vocab_size:
            raise ValueError(f"num_sentinels={self.num_sentinels} must be in [1, vocab_size={self.vocab_size}).")
        self.sentinel_start = self.vocab_size - 1  # <extra_id_0>
        if tokenizer is not None:
            _check_sentinels(tokenizer, self.sentinel_start, self.num_sentinels, self.eos_token_id, self.pad_token_id)
        self.seed, self.generator = seed, generator

    def __call__(self, examples):
        columns = read_features(examples)
        rows = columns["input_ids"]
        rng = numpy_rng(self._rng())
        lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
        ids, _ = pad_ragged_numpy(rows, self.pad_token_id)  # (B, L); one length: no padding at all
        inputs, targets = [None] * len(rows), [None] * len(rows)
        for length in np.unique(lengths).tolist():
            self._check_length(length)
            index = np.flatnonzero(lengths == length)
            noise = _noise_mask(len(index), length, self.noise_density, self.mean_noise_span_length, rng)
            batch_inputs, batch_targets = _corrupt(ids[index, :length], noise, self.sentinel_start, self.eos_token_id)
            if len(index) == len(rows):
                return _as_batch(batch_inputs, batch_targets)
            for j, i in enumerate(index.tolist()):
                inputs[i], targets[i] = batch_inputs[j], batch_targets[j]
        input_ids, real = pad_ragged_numpy(inputs, self.pad_token_id)
        labels, _ = pad_ragged_numpy(targets, IGNORE_INDEX)
        return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(real.astype(np.int64)),
                "labels": torch.from_numpy(labels)}

    def _check_length(self, length: int) -> None:
        if length < 2:
            raise ValueError(f"A text of {length} token(s) is too short to corrupt: span corruption needs at least "
                             f"2 (one kept, one noise). Drop shorter examples or join texts into longer rows.")
        spans = _span_counts(length, self.noise_density, self.mean_noise_span_length)[1]
        if spans > self.num_sentinels:
            raise ValueError(
                f"A row of {length} tokens gets {spans} noise spans but only {self.num_sentinels} sentinel ids exist: "
                f"shorten the rows (compute_input_and_target_lengths) or raise mean_noise_span_length."
            )


def _as_batch(inputs: np.ndarray, targets: np.ndarray) -> dict:
    input_ids = torch.from_numpy(inputs)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": torch.from_numpy(targets)}


def _count_sentinels(tokenizer) -> int:
    if tokenizer is None:
        return 100
    extra = [t for t in getattr(tokenizer, "all_special_tokens", None) or [] if str(t).startswith("<extra_id_")]
    return len(extra) or 100


def _check_sentinels(tokenizer, start: int, count: int, eos: int, pad: int) -> None:
    """Each sentinel id (start, start - 1, ...) must be a special token, never a real piece of text."""
    special = set(int(i) for i in getattr(tokenizer, "all_special_ids", []))
    for j in range(count):
        token_id = start - j
        if token_id in (eos, pad) or token_id not in special:
            token = tokenizer.convert_ids_to_tokens(token_id)
            raise ValueError(
                f"Sentinel <extra_id_{j}> would be id {token_id}, which is the real vocabulary entry {token!r}: span "
                f"corruption writes sentinels over the last {count} ids of the vocabulary. Use a tokenizer whose last "
                f"ids are <extra_id_*> tokens (hf_xfmr.data.train_tokenizer('t5') adds 100; `hf-xfmr pretrain` "
                f"trains one when --tokenizer is left out), or, in Python, pass num_sentinels= the number of "
                f"trailing special tokens."
            )
