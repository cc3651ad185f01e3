"""Permutation language modelling collator for XLNet (Yang et al. 2019, https://arxiv.org/abs/1906.08237).

Follows the official pretraining pipeline (`data_utils.py`: `_sample_mask`, `_local_perm`,
`parser`) rather than transformers' `DataCollatorForPermutationLanguageModeling`:

- Targets (partial prediction, paper sec. 2.3): spans of n whole words, p(n) ∝ 1/n for
  n = 1..max_span, each placed at a random offset inside its own context window of
  n * mask_alpha / mask_beta words (6/1 -> about 1/6 of the tokens); the windows follow each
  other through the row. Spans are taken left to right until the row has its budget of targets
  (the span that overshoots is cut, later ones dropped); a row that falls short is topped up with
  single random positions, so every row has exactly its budget: real_len * mask_beta / mask_alpha
  (at least 1, at most `num_predict`), from the row's own non-pad length (85 for a full row of
  512; a row of 300 real tokens padded to 512 gets 50, not 85); `budget_rounding="random"` rounds
  it up with probability equal to its fraction, so rows average exactly 1/6 (10.67 of 64, not 10).
  Special and pad tokens are never targets.
- Factorization order: a random permutation inside consecutive chunks of `perm_size` positions
  (chunks, and the reuse/non-reuse blocks, stay in order). In `perm_mask[b, i, j]` (1/True = i
  may not attend to j) non-targets see every non-target and no target; a target sees every
  non-target and the targets that come earlier in the order, never itself (the query stream must
  not see the token it predicts; the model's content stream adds the diagonal back). Only the
  targets' places in the order matter, so only they are drawn.
- `perm_mask` is bool by default (`perm_mask_dtype=torch.bool`): transformers' XLNet gives
  bit-identical outputs with a bool or a float mask, and the bool (B, L, L) mask takes 4x less
  memory (2 MB instead of 8 MB at batch 8 x 512), which also makes it 4x cheaper to write, pin
  and copy to the GPU. `perm_mask_dtype=torch.float32` gives the float mask of the reference.
- The content stream gets the *real* tokens; `target_mapping` (B, num_predict, L) one-hot gathers
  the targets in position order; unused rows are all-zero with label -100.
- `reuse_len`: positions [0, reuse_len) never attend to [reuse_len, L), so hidden states cached as
  memory for the next segment carry nothing about it (paper sec. 2.5 / appendix A.1).
- `bi_data`: the second half of the batch holds the same kind of rows with the text of every
  segment reversed (spans still sampled on forward text, as `_sample_mask(reverse=True)` does);
  pair it with an XLNet config that has `bi_data=True`.

Deviations from the official code, on purpose: SEP/CLS are ordinary always-visible non-targets
instead of taking part in the permutation (same information flow for the predicted tokens, and
a simpler invariant); the context windows are counted in words, not tokens (the official code
walks `cur_len` in tokens but spans in words, so multi-token words push its rate above
mask_beta / mask_alpha and it reaches `num_predict` before the end of the row, leaving the tail
without targets; counting both in words keeps the rate at 1/6 of the tokens along the whole row,
and makes every window's place a cumulative sum, so all spans of the batch are drawn at once with
numpy instead of one Python step per span); the span sits wholly inside its window (offset drawn
from [0, window - n]), so spans never overlap; a span that would overshoot `num_predict` is cut
(the official code can overshoot); padding and any (odd) length are supported (the official data
has neither).

Implementation: the batch is built with a handful of numpy ops on the whole batch (no per-token
or per-span Python loop); all random numbers of a batch come from one `torch.rand` call on the
collator's generator (so `seed`, `generator` and `torch.manual_seed` reproduce batches).
`perm_mask` is written as the "non-target" row broadcast over all rows, then the num_predict
target rows are overwritten, instead of comparing all L x L pairs.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from .collation import (
    IGNORE_INDEX,
    SeededMixin,
    intra_op_threads,
    pad_ragged_numpy,
    pad_word_ids,
    read_features,
    require_token,
    special_ids_tensor,
)
from .mlm import ngram_probs, word_starts

_PERM_MASK_DTYPES = (torch.bool, torch.float32, torch.float64, torch.float16, torch.bfloat16)
BUDGET_ROUNDINGS = ("floor", "random")


def vocab_word_start_table(tokenizer) -> torch.Tensor:
    """(V,) bool: does this vocabulary entry begin a word? Built once from the token strings.

    Used only when the examples carry no `word_ids`. Metaspace ('▁') and byte-level ('Ġ')
    vocabularies mark word starts; WordPiece marks continuations ('##'); otherwise every token
    counts as a word start.
    """
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    vocab = [t or "" for t in vocab]
    for marker in ("▁", "Ġ"):
        if sum(t.startswith(marker) for t in vocab) > len(vocab) // 10:
            return torch.tensor([t.startswith(marker) for t in vocab])
    if any(t.startswith("##") for t in vocab):
        return torch.tensor([not t.startswith("##") for t in vocab])
    return torch.ones(len(vocab), dtype=torch.bool)


def xlnet_token_type_ids(input_ids: torch.Tensor, real: torch.Tensor, sep_id: int, cls_id: int) -> torch.Tensor:
    """Segment ids as XLNet builds them for `[A, SEP, B, SEP, CLS]`: 0 up to the first SEP, 1 after, CLS 2."""
    ids, real = np.asarray(input_ids), np.asarray(real)
    return torch.from_numpy(_token_types(ids, real, sep_id, cls_id, bool(real.all())))


def _token_types(ids: np.ndarray, real: np.ndarray, sep_id: int, cls_id: int, full: bool) -> np.ndarray:
    is_sep = ids == sep_id
    if not full:
        is_sep &= real
    before = np.cumsum(is_sep, 1)
    before -= is_sep  # SEPs strictly before each position
    tt = np.minimum(before, 1)
    is_cls = ids == cls_id
    if not full:
        is_cls &= real
    tt[is_cls] = 2
    if not full:
        tt[~real] = 0
    return tt


def _reverse_segments(content: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(B, L) gather index that reverses every run of content tokens in the selected rows."""
    B, L = content.shape
    pos = torch.arange(L).expand(B, L)
    run_id = torch.cumsum(~content, 1)  # constant along a run of content tokens
    key = (torch.arange(B)[:, None] * (L + 1) + run_id).reshape(-1)
    key = torch.where(content.reshape(-1), key, B * (L + 1))  # non-content positions go to a spare bucket
    flat_pos = pos.reshape(-1)
    start = torch.full((B * (L + 1) + 1,), L, dtype=torch.long).scatter_reduce(0, key, flat_pos, "amin")
    end = torch.zeros(B * (L + 1) + 1, dtype=torch.long).scatter_reduce(0, key, flat_pos, "amax")
    rev = (start[key] + end[key] - flat_pos).reshape(B, L)
    keep = ~content | ~rows[:, None]
    return torch.where(keep, pos, rev)


@dataclass
class DataCollatorForPLM(SeededMixin):
    """Builds XLNet pretraining batches (inputs for `XLNetLMHeadModel.forward`).

    Args:
        tokenizer: XLNet-style tokenizer with pad, sep and cls tokens (`train_tokenizer("unigram")`).
        seq_len: pad every batch to this length (XLNet: 512); None pads to the longest row.
        num_predict: targets per row (XLNet: 85 for 512); default length * mask_beta / mask_alpha
            (rounded up with budget_rounding="random").
        max_span: longest span, in words (XLNet: 5).
        mask_alpha, mask_beta: about mask_beta of every mask_alpha tokens are predicted (6, 1).
        perm_size: permute inside chunks of this many positions (default: the whole block).
        reuse_len: length of the leading block that is cached as memory (XLNet: 256 of 512).
        bi_data: second half of the batch reversed (needs an even batch size).
        budget_rounding: how a row's budget real_len * mask_beta / mask_alpha becomes a whole number of
            targets: "floor" (the official code's int(); 10 for a row of 64) or "random" (rounded up with
            probability equal to the fraction, so the expected number of targets is exactly the rate:
            10.67 for 64, as transformers' collator averages).
        return_token_type_ids: False leaves `token_type_ids` out of the batch: the whole row is one segment
            (XLNet's relative segment term is then the same for every key and drops out of the softmax;
            transformers' `run_plm.py` batches have no segment ids either). Rows then need not follow the
            `[A, SEP, B, SEP, CLS]` layout.
        perm_mask_dtype: `torch.bool` (default) or a float dtype such as `torch.float32`.
            XLNet's outputs are bit-identical with either; bool takes 4x less memory (2 MB instead
            of 8 MB per 8 x 512 batch) and is 4x cheaper to build, pin and move to the GPU.
        compact: return `perm_ranks` (B, L) and `target_positions` (B, num_predict) instead of
            `perm_mask` (B, L, L) and `target_mapping` (B, num_predict, L): nothing O(B * L^2) is built.
            hf_xfmr's XLNet takes them directly (pair it with a config whose `reuse_len` equals this
            collator's: the model applies the memory block from its config); transformers' XLNet does not.
        return_is_masked: also return `is_masked` (B, L) bool; do not pass it to the model.
        num_threads: torch intra-op threads while collating (1: fastest for batch-sized work);
            None leaves torch's setting alone.
        seed / generator: reproducible batches.

    Examples: dicts with `input_ids` (already `[A, SEP, B, SEP, CLS]`, e.g. from the XLNet
    tokenizer) and optionally `token_type_ids`, `attention_mask`, `word_ids`; or bare id
    sequences. Ids may be lists, numpy arrays or 1-D tensors; rows that all have the batch's
    length are converted in one call.

    Targets per row: each row's own budget, about real_len * mask_beta / mask_alpha (at least 1), where
    real_len counts its non-pad tokens; `num_predict` (default: the padded length * mask_beta /
    mask_alpha) caps it and is the output width. Unused slots are all-zero rows of target_mapping
    (position -1 in the compact form) with label -100, ignored by the loss.

    Returns: input_ids (B, L) real tokens, perm_mask (B, L, L) `perm_mask_dtype` (True/1 = may not
    attend), target_mapping (B, num_predict, L) float, labels (B, num_predict), token_type_ids
    (B, L), attention_mask (B, L). With `compact`: perm_ranks (B, L) int64 (-1 = seen by every
    position, k >= 0 = the k-th target of the factorization order) and target_positions
    (B, num_predict) int64 (-1 = unused slot) replace perm_mask and target_mapping.
    """

    tokenizer: object
    seq_len: int | None = None
    num_predict: int | None = None
    max_span: int = 5
    mask_alpha: float = 6
    mask_beta: float = 1
    perm_size: int | None = None
    reuse_len: int | None = None
    bi_data: bool = False
    budget_rounding: str = "floor"
    return_token_type_ids: bool = True
    pad_to_multiple_of: int | None = None
    perm_mask_dtype: torch.dtype = torch.bool
    compact: bool = False
    return_is_masked: bool = False
    num_threads: int | None = 1
    seed: int | None = None
    generator: torch.Generator | None = None

    def __post_init__(self):
        if self.max_span < 1:
            raise ValueError(f"max_span must be >= 1, got {self.max_span} (XLNet uses 5).")
        if self.mask_alpha <= 0 or self.mask_beta <= 0 or self.mask_beta > self.mask_alpha:
            raise ValueError(
                f"Need 0 < mask_beta <= mask_alpha (XLNet: mask_alpha=6, mask_beta=1), got "
                f"mask_alpha={self.mask_alpha}, mask_beta={self.mask_beta}."
            )
        if self.num_predict is not None and self.num_predict < 1:
            raise ValueError(f"num_predict must be >= 1, got {self.num_predict}.")
        if self.budget_rounding not in BUDGET_ROUNDINGS:
            raise ValueError(f"budget_rounding must be one of {BUDGET_ROUNDINGS}, got {self.budget_rounding!r}.")
        if self.perm_mask_dtype not in _PERM_MASK_DTYPES:
            raise ValueError(
                f"perm_mask_dtype must be torch.bool (default, 4x smaller) or a float dtype such as "
                f"torch.float32, got {self.perm_mask_dtype}."
            )
        if self.seq_len is not None:
            if self.num_predict is not None and self.num_predict > self.seq_len - 1:
                raise ValueError(
                    f"num_predict={self.num_predict} is larger than possible for seq_len={self.seq_len}: at "
                    f"most seq_len minus the special tokens can be predicted. Use num_predict <= "
                    f"seq_len * mask_beta / mask_alpha (= {int(self.seq_len * self.mask_beta / self.mask_alpha)})."
                )
            self._check_blocks(self.seq_len)
        self.pad_token_id = require_token(self.tokenizer, "pad_token", "Permutation language modelling (padding)")
        self.sep_token_id = require_token(self.tokenizer, "sep_token", "Permutation language modelling ([A, SEP, B, SEP, CLS])")
        self.cls_token_id = require_token(self.tokenizer, "cls_token", "Permutation language modelling ([A, SEP, B, SEP, CLS])")
        self.special_ids = special_ids_tensor(self.tokenizer)
        self.left_pad = getattr(self.tokenizer, "padding_side", "right") == "left"
        self.word_start_table = vocab_word_start_table(self.tokenizer)
        # One (V,) int8 table: bit 0 = special token, bit 1 = the piece begins a word.
        V = max(len(self.word_start_table), int(self.special_ids.max()) + 1 if len(self.special_ids) else 0)
        code = np.zeros(V, dtype=np.int8)
        code[: len(self.word_start_table)] = 2 * self.word_start_table.numpy()
        code[self.special_ids.numpy()] |= 1
        self._code = code
        self._cdf = np.cumsum(ngram_probs(self.max_span).numpy())[:-1]  # inverse CDF of p(n) ∝ 1/n
        self._chunk_cache: dict[int, np.ndarray] = {}

    def _check_blocks(self, L: int) -> None:
        if self.reuse_len is not None and not 0 < self.reuse_len < L:
            raise ValueError(
                f"reuse_len={self.reuse_len} must be in (0, {L}) for sequences of length {L} "
                "(XLNet uses reuse_len = seq_len // 2); pass reuse_len=None to disable memory reuse."
            )
        if self.perm_size is not None:
            limit = min(self.reuse_len, L - self.reuse_len) if self.reuse_len else L
            if not 0 < self.perm_size <= limit:
                raise ValueError(
                    f"perm_size={self.perm_size} must be in [1, {limit}]: a permutation chunk larger than the "
                    "reused block would let cached memory leak targets (XLNet uses perm_size = reuse_len)."
                )

    def _chunks(self, L: int) -> np.ndarray | None:
        """(L,) float64 chunk index of each position in the factorization order; None: one chunk."""
        if not self.reuse_len and not self.perm_size:
            return None
        if L not in self._chunk_cache:
            pos = np.arange(L)
            if self.reuse_len:
                R = self.reuse_len
                size0 = self.perm_size or R
                size1 = self.perm_size or (L - R)
                chunk = np.where(pos < R, pos // size0, (R + size0 - 1) // size0 + (pos - R) // size1)
            else:
                chunk = pos // self.perm_size
            self._chunk_cache[L] = chunk.astype(np.float64)
        return self._chunk_cache[L]

    def _budget(self, real_len: int) -> int:
        """The most targets a row of `real_len` tokens can get: its rate, rounded down ("floor") or up ("random")."""
        rate = real_len * self.mask_beta / self.mask_alpha
        return math.ceil(rate) if self.budget_rounding == "random" else int(rate)

    # ------------------------------------------------------------------ sampling
    def _num_windows(self, max_words: int) -> int:
        """Windows per block that surely cover `max_words` words (the shortest window is n=1)."""
        shortest = max(1, int(self.mask_alpha / self.mask_beta))
        return max_words // shortest + 1

    def _sample_targets(self, starts, cand, goals, bounds, u_span, u_top) -> np.ndarray:
        """Span sampling for the whole batch at once; returns (B, L) bool targets.

        starts/cand: (B, L) bool numpy; goals: (B, blocks) targets per row and block; bounds: [(lo, hi)];
        u_span: (G, K, 2) uniforms (G = B * blocks); u_top: (B, L) uniforms for the top-up.
        """
        B, L = cand.shape
        nblk = len(bounds)
        G = B * nblk
        # Word-start positions grouped by (row, block), in position order.
        flat = np.flatnonzero(starts)
        row = flat // L
        pos = flat - row * L
        grp = row * nblk + (pos >= bounds[1][0]) if nblk == 2 else row
        counts = np.bincount(grp, minlength=G)  # words per (row, block)
        first = np.cumsum(counts) - counts
        wmax = int(counts.max())
        his = np.array([hi for _, hi in bounds] * B)
        # table[g, w] = position of the w-th word of group g; hi of the block from cnt[g] on (sentinel).
        table = np.repeat(his[:, None], wmax + 1, axis=1)
        table[grp, np.arange(len(flat)) - first[grp]] = pos
        # Windows: n words (p(n) ∝ 1/n) in a window of int(n * ratio) words, at offset l in [0, ctx - n].
        n = np.searchsorted(self._cdf, u_span[..., 0], side="right") + 1  # (G, K)
        ctx = (n * (self.mask_alpha / self.mask_beta)).astype(np.int64)
        off = (u_span[..., 1] * (ctx - n + 1)).astype(np.int64)
        end = np.cumsum(ctx, 1)
        beg = end - ctx + off  # first word of each span, inside its block
        stop = np.minimum(beg + n, wmax)
        np.minimum(beg, wmax, out=beg)  # spans past the last word become empty (hi, hi)
        lo_pos = np.take_along_axis(table, beg, 1)
        hi_pos = np.take_along_axis(table, stop, 1)
        # Cover the spans with a difference array (+1 at each start, -1 at each stop) per row.
        base = (np.arange(G) // nblk * (L + 1))[:, None]
        size = B * (L + 1)
        diff = np.bincount((lo_pos + base).ravel(), minlength=size) - np.bincount((hi_pos + base).ravel(), minlength=size)
        cover = np.cumsum(diff.reshape(B, L + 1)[:, :L], 1) > 0
        cover &= cand
        # Keep the first `goal` targets of each block (cut the overshooting span, drop the later ones).
        cs = np.cumsum(cover, 1)
        if nblk == 2:
            R = bounds[1][0]
            before = cs[:, R - 1].copy()
            cs[:, R:] -= before[:, None]
            have = np.stack([before, cs[:, L - 1]], 1)  # (B, 2)
            goal_pos = np.where(np.arange(L)[None, :] < R, goals[:, :1], goals[:, 1:])  # (B, L)
            cover &= cs <= goal_pos
        else:
            have = cs[:, L - 1:]
            cover &= cs <= goals[:, :1]
        deficit = goals - np.minimum(have, goals)  # (B, blocks)
        if deficit.max() > 0:  # top up with the `deficit` free positions of smallest random key
            # Integer keys, unique by construction (24 random bits, then the position), so a
            # threshold picks exactly `deficit` positions per row and block.
            key = (u_top * (1 << 24)).astype(np.int64)
            key *= L
            key += np.arange(L)
            none = np.iinfo(np.int64).max
            key[~cand | cover] = none
            for k, (lo, hi) in enumerate(bounds):
                need = deficit[:, k]
                most = int(need.max())
                if most <= 0:
                    continue
                s = key[:, lo:hi]
                smallest = np.partition(s, most - 1, axis=1)[:, :most] if most < hi - lo else s.copy()
                smallest.sort(1)
                thr = smallest[np.arange(B), np.maximum(need, 1) - 1]
                thr[need <= 0] = -1
                cover[:, lo:hi] |= (s <= thr[:, None]) & (s != none)
        return cover

    # ------------------------------------------------------------------ call
    def __call__(self, examples) -> dict[str, torch.Tensor]:
        with intra_op_threads(self.num_threads):
            return self._collate(examples)

    def _collate(self, examples) -> dict[str, torch.Tensor]:
        """One batch in named steps; every random number comes from one draw on the collator's generator."""
        g = self._rng()
        cols = read_features(examples)
        ids, real = self._pad_inputs(cols)  # (B, L) int64 ids, (B, L) bool real tokens
        B, L = ids.shape
        full = bool(real.all())
        num_predict = self._check_batch(B, L)
        code, special, cand = self._classify(ids, real, full)  # (B, L) each
        token_type_ids = self._token_type_ids(cols, ids, real, full)  # (B, L) or None
        starts = self._word_starts(cols, code, special, cand)  # (B, L) bool
        u_span, u_top, u_rank, u_round = self._draw(g, B, L, num_predict)
        bounds, goals = self._goals(real, num_predict, u_round)
        is_masked = self._sample_targets(starts, cand, goals, bounds, u_span, u_top)  # (B, L)
        if self.bi_data:
            ids, is_masked, token_type_ids = self._reverse_second_half(ids, real, is_masked, token_type_ids)
        tpos, valid, rank = self._factorization_order(is_masked, u_rank, num_predict)

        labels = np.take_along_axis(ids, tpos, 1)  # (B, num_predict)
        if valid is not None:
            labels[~valid] = IGNORE_INDEX
        batch = {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels)}
        if token_type_ids is not None:
            batch["token_type_ids"] = torch.from_numpy(np.ascontiguousarray(token_type_ids, dtype=np.int64))
        batch["attention_mask"] = torch.from_numpy(real.astype(np.int64))
        if self.return_is_masked:
            batch["is_masked"] = torch.from_numpy(is_masked)
        if self.compact:  # O(B * L): the model builds the masks it needs from these
            batch.update(_compact_order(tpos, valid, rank, L))
            return batch
        batch["perm_mask"] = self._perm_mask(is_masked, real, full, tpos, valid, rank)
        batch["target_mapping"] = _target_mapping(tpos, valid, L)
        return batch

    # ------------------------------------------------------------------ steps of a batch
    def _pad_inputs(self, cols: dict) -> tuple[np.ndarray, np.ndarray]:
        """(B, L) padded ids and (B, L) bool real tokens (non-pad, and 1 in a given attention_mask)."""
        ids, real = pad_ragged_numpy(
            cols["input_ids"], self.pad_token_id, length=self.seq_len, left=self.left_pad,
            pad_to_multiple_of=None if self.seq_len else self.pad_to_multiple_of,
        )  # (B, L)
        if "attention_mask" in cols:
            given, _ = pad_ragged_numpy(cols["attention_mask"], 0, length=ids.shape[1], left=self.left_pad)
            real &= given.astype(bool)
        return ids, real

    def _check_batch(self, B: int, L: int) -> int:
        """Check the batch's shape against the settings; return its number of target slots, num_predict."""
        if self.seq_len is None:
            self._check_blocks(L)
        if self.bi_data and B % 2:
            raise ValueError(f"bi_data=True needs an even batch size (forward + backward halves), got {B}.")
        num_predict = self.num_predict or max(1, self._budget(L))
        if num_predict > L:
            raise ValueError(
                f"num_predict={num_predict} is larger than possible: the batch is only {L} tokens long. "
                "Lower num_predict or pass longer sequences / seq_len."
            )
        return num_predict

    def _classify(self, ids: np.ndarray, real: np.ndarray, full: bool):
        """(B, L) vocabulary codes (bit 0 special, bit 1 word start), special-or-pad mask, and target candidates."""
        try:
            code = self._code[ids]
        except IndexError:
            raise ValueError(
                f"input_ids must be in [0, {len(self._code)}) (the tokenizer's vocabulary), got values in "
                f"[{int(ids.min())}, {int(ids.max())}]."
            ) from None
        special = (code & 1).astype(bool)
        if not full:
            special |= ~real
        cand = ~special  # (B, L) positions that may become targets
        if not cand.any(1).all():
            raise ValueError(
                f"Example(s) {np.flatnonzero(~cand.any(1)).tolist()} have no token that can be predicted "
                "(only special or pad tokens): the sequence is too short. Filter out empty texts or "
                "concatenate documents into longer sequences."
            )
        return code, special, cand

    def _token_type_ids(self, cols: dict, ids: np.ndarray, real: np.ndarray, full: bool) -> np.ndarray | None:
        """(B, L) segment ids: the examples' own, else XLNet's from the SEP/CLS layout; None when not returned."""
        if not self.return_token_type_ids:
            return None
        if "token_type_ids" in cols:
            return pad_ragged_numpy(cols["token_type_ids"], 0, length=ids.shape[1], left=self.left_pad)[0]
        return _token_types(ids, real, self.sep_token_id, self.cls_token_id, full)

    def _word_starts(self, cols: dict, code: np.ndarray, special: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """(B, L) bool: where a word begins, from the examples' `word_ids` or else the vocabulary's markers."""
        if "word_ids" in cols:
            wid = pad_word_ids(cols["word_ids"], code.shape[1], self.left_pad)
            return word_starts(torch.from_numpy(special), word_ids=wid).numpy()
        starts = code >= 2  # a piece that begins a word, or a segment's first token
        starts[:, 1:] |= special[:, :-1]
        starts[:, 0] = True
        starts &= cand
        return starts

    def _draw(self, g, B: int, L: int, num_predict: int):
        """Every random number of the batch in one draw, split into: span uniforms (B * blocks, K, 2), top-up
        scores (B, L), factorization keys (B, num_predict) and, with budget_rounding="random", the budgets'
        rounding (B,) (drawn last, so "floor" draws exactly what it always drew; else None)."""
        nblk = 2 if self.reuse_len else 1
        K = self._num_windows(max(self.reuse_len, L - self.reuse_len) if self.reuse_len else L)
        n_span, n_top, n_rank = B * nblk * K * 2, B * L, B * num_predict
        n_round = B if self.budget_rounding == "random" else 0
        u = torch.rand(n_span + n_top + n_rank + n_round, generator=g).numpy()
        u_span = u[:n_span].reshape(B * nblk, K, 2)
        u_top = u[n_span:n_span + n_top].reshape(B, L)
        u_rank = u[n_span + n_top:n_span + n_top + n_rank].reshape(B, num_predict)
        return u_span, u_top, u_rank, (u[-n_round:] if n_round else None)

    def _goals(self, real: np.ndarray, num_predict: int, u_round: np.ndarray | None):
        """Each row's own budget, split over the blocks: ([(lo, hi)] block bounds, (B, blocks) targets).

        About real_len * mask_beta / mask_alpha targets per row (at least 1), capped by num_predict (the
        output width): a padded row does not get the full-length budget. With memory reuse the budget is
        split between the two blocks in proportion to their real tokens.
        """
        L = real.shape[1]
        real_len = real.sum(1)  # (B,)
        rate = real_len * (self.mask_beta / self.mask_alpha)
        if u_round is not None:
            rate = rate + u_round  # floor(x + U[0, 1)) is x rounded up with probability frac(x)
        row_goal = np.clip(rate.astype(np.int64), 1, num_predict)
        if not self.reuse_len:
            return [(0, L)], row_goal[:, None]
        R = self.reuse_len
        goal0 = row_goal * real[:, :R].sum(1) // np.maximum(real_len, 1)
        return [(0, R), (R, L)], np.stack([goal0, row_goal - goal0], 1)

    def _reverse_second_half(self, ids, real, is_masked, token_type_ids):
        """bi_data: reverse every segment's text in the second half of the batch (targets move with their tokens)."""
        B = ids.shape[0]
        rows = torch.arange(B) >= B // 2
        text = real & (ids != self.sep_token_id) & (ids != self.cls_token_id)
        src = _reverse_segments(torch.from_numpy(text), rows).numpy()  # (B, L) gather index
        ids = np.take_along_axis(ids, src, 1)
        is_masked = np.take_along_axis(is_masked, src, 1)
        if token_type_ids is not None:
            token_type_ids = np.take_along_axis(token_type_ids, src, 1)
        return ids, is_masked, token_type_ids

    def _factorization_order(self, is_masked: np.ndarray, u_rank: np.ndarray, num_predict: int):
        """Targets in position order and their places in the factorization order.

        Returns tpos (B, num_predict) positions, valid (B, num_predict) bool used slots (None when every row
        has num_predict targets) and rank (B, num_predict): random keys, chunks kept in order.
        """
        B, L = is_masked.shape
        counts = is_masked.sum(1)
        if (counts == num_predict).all():  # usual case
            tpos = (np.flatnonzero(is_masked) % L).reshape(B, num_predict)
            valid = None
        else:
            pos = np.arange(L)
            tpos = np.argsort(np.where(is_masked, pos, pos + L), 1, kind="stable")[:, :num_predict]
            valid = np.arange(num_predict)[None, :] < counts[:, None]
        key = u_rank.astype(np.float64)
        chunks = self._chunks(L)
        if chunks is not None:
            key = chunks[tpos] + 0.5 * key
        if valid is not None:
            key[~valid] = np.inf
        rank = np.argsort(np.argsort(key, 1), 1)  # (B, num_predict) place of each target in the order
        return tpos, valid, rank

    def _perm_mask(self, is_masked, real, full: bool, tpos, valid, rank) -> torch.Tensor:
        """(B, L, L) `perm_mask_dtype`, True/1 = position i may not attend to j.

        Every row starts as the non-target row (targets and pad hidden); target rows then see j iff j is a
        non-target or an earlier target: c_j >= rank_i hides j, with c = -1 for non-targets, the target's
        rank for targets, the dtype's max for padding.
        """
        B, L = is_masked.shape
        num_predict = tpos.shape[1]
        dt = np.int8 if num_predict < 127 else np.int16 if num_predict < 32767 else np.int32
        hidden = is_masked if full else is_masked | ~real
        c = np.full((B, L), -1, dtype=dt)
        flat_t = tpos + (np.arange(B) * L)[:, None]  # (B, num_predict) flat row index of each target
        if valid is None:
            c.reshape(-1)[flat_t.reshape(-1)] = rank.reshape(-1)
        else:
            c.reshape(-1)[flat_t[valid]] = rank[valid]
        if not full:
            c[~real] = np.iinfo(dt).max
        rows = c[:, None, :] >= rank.astype(dt)[:, :, None]  # (B, num_predict, L) (numpy: SIMD int8)
        hidden_t = torch.from_numpy(hidden)
        perm = torch.empty(B, L, L, dtype=torch.bool)  # broadcast copies: torch's copy_ is the fastest writer
        if self.reuse_len:  # memory must not know the future block
            R = self.reuse_len
            later = np.arange(L) >= R
            perm[:, :R].copy_(torch.from_numpy(hidden | later)[:, None, :].expand(B, R, L))
            perm[:, R:].copy_(hidden_t[:, None, :].expand(B, L - R, L))
            rows |= (tpos < R)[:, :, None] & later
        else:
            perm.copy_(hidden_t[:, None, :].expand(B, L, L))
        # Overwrite the target rows (numpy fancy row assignment on the same buffer: a plain memcpy per row).
        if valid is None:
            perm.numpy().reshape(B * L, L)[flat_t.reshape(-1)] = rows.reshape(B * num_predict, L)
        else:
            perm.numpy().reshape(B * L, L)[flat_t[valid]] = rows[valid]
        return perm if self.perm_mask_dtype == torch.bool else perm.to(self.perm_mask_dtype)


def _compact_order(tpos: np.ndarray, valid: np.ndarray | None, rank: np.ndarray, L: int) -> dict[str, torch.Tensor]:
    """The compact form: perm_ranks (B, L) (-1 = seen by all, k = k-th target) and target_positions
    (B, num_predict) (-1 = unused slot)."""
    B = tpos.shape[0]
    ranks = np.full((B, L), -1, dtype=np.int64)
    positions = tpos.astype(np.int64)
    if valid is None:
        np.put_along_axis(ranks, tpos, rank, 1)
    else:
        rows = np.nonzero(valid)[0]
        ranks[rows, tpos[valid]] = rank[valid]
        positions[~valid] = -1
    return {"perm_ranks": torch.from_numpy(ranks), "target_positions": torch.from_numpy(positions)}


def _target_mapping(tpos: np.ndarray, valid: np.ndarray | None, L: int) -> torch.Tensor:
    """(B, num_predict, L) float32: one-hot rows at the targets in position order, zero rows beyond each
    row's count."""
    B, num_predict = tpos.shape
    tm = np.zeros((B, num_predict, L), dtype=np.float32)
    # flat index of (b, k, tpos[b, k]) = b * num_predict * L + k * L + tpos[b, k]
    hot = tpos + (np.arange(B) * num_predict * L)[:, None] + (np.arange(num_predict) * L)[None, :]
    tm.reshape(-1)[hot.reshape(-1) if valid is None else hot[valid]] = 1.0
    return torch.from_numpy(tm)
