"""Permutation language modelling collator for XLNet (Yang et al. 2019, https://arxiv.org/abs/1906.08237).

Follows the official pretraining pipeline (`data_utils.py`: `_sample_mask`, `_local_perm`,
`parser`) rather than transformers' `DataCollatorForPermutationLanguageModeling`:

- Targets (partial prediction, paper sec. 2.3): spans of n whole words, p(n) ∝ 1/n for
  n = 1..max_span, each placed at a word start inside a context window of n * mask_alpha /
  mask_beta tokens (6/1 -> about 1/6 of the tokens), then topped up with single random positions
  until exactly `num_predict` targets per row (85 for 512). Special and pad tokens are never targets.
- Factorization order: a random permutation inside consecutive chunks of `perm_size` positions
  (chunks, and the reuse/non-reuse blocks, stay in order). In `perm_mask[b, i, j]` (1 = i may not
  attend to j) non-targets see every non-target and no target; a target sees every non-target and
  the targets that come earlier in the order, never itself (the query stream must not see the
  token it predicts; the model's content stream adds the diagonal back).
- The content stream gets the *real* tokens; `target_mapping` (B, num_predict, L) one-hot gathers
  the targets in position order; unused rows are all-zero with label -100.
- `reuse_len`: positions [0, reuse_len) never attend to [reuse_len, L), so hidden states cached as
  memory for the next segment carry nothing about it (paper sec. 2.5 / appendix A.1).
- `bi_data`: the second half of the batch holds the same kind of rows with the text of every
  segment reversed (spans still sampled on forward text, as `_sample_mask(reverse=True)` does);
  pair it with an XLNet config that has `bi_data=True`.

Deviations from the official code, on purpose: SEP/CLS are ordinary always-visible non-targets
instead of taking part in the permutation (same information flow for the predicted tokens, and
a simpler invariant); a span that would overshoot `num_predict` is cut (the official code can
overshoot); padding and any (odd) length are supported (the official data has neither).
"""

from dataclasses import dataclass

import torch

from ._common import (
    IGNORE_INDEX,
    SeededMixin,
    intra_op_threads,
    pad_ragged,
    read_features,
    require_token,
    special_ids_tensor,
)
from .mlm import _word_ids_tensor, ngram_probs, word_starts


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
    is_sep = (input_ids == sep_id) & real
    before = torch.cumsum(is_sep, 1) - is_sep.long()  # SEPs strictly before each position
    tt = before.clamp(max=1)
    tt[(input_ids == cls_id) & real] = 2
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
        num_predict: targets per row (XLNet: 85 for 512); default length * mask_beta / mask_alpha.
        max_span: longest span, in words (XLNet: 5).
        mask_alpha, mask_beta: about mask_beta of every mask_alpha tokens are predicted (6, 1).
        perm_size: permute inside chunks of this many positions (default: the whole block).
        reuse_len: length of the leading block that is cached as memory (XLNet: 256 of 512).
        bi_data: second half of the batch reversed (needs an even batch size).
        return_is_masked: also return `is_masked` (B, L) bool; do not pass it to the model.
        num_threads: torch intra-op threads while collating (1: fastest for batch-sized work);
            None leaves torch's setting alone.
        seed / generator: reproducible batches.

    Examples: dicts with `input_ids` (already `[A, SEP, B, SEP, CLS]`, e.g. from the XLNet
    tokenizer) and optionally `token_type_ids`, `attention_mask`, `word_ids`; or bare id lists.

    Returns: input_ids (B, L) real tokens, perm_mask (B, L, L) float, target_mapping
    (B, num_predict, L) float, labels (B, num_predict), token_type_ids (B, L), attention_mask (B, L).
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
    pad_to_multiple_of: int | None = None
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
        self._cdf = torch.cumsum(ngram_probs(self.max_span), 0).float()

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

    # ------------------------------------------------------------------ sampling
    def _sample_targets(self, starts, cand, goals, bounds, g) -> torch.Tensor:
        """Span sampling (`_sample_mask`), one Python step per span; returns (B, L) bool targets.

        starts/cand: (B, L) bool; goals: targets per block; bounds: [(lo, hi)] position ranges.
        """
        B, L = cand.shape
        next_word = torch.cumsum(starts, 1) - starts.long()  # first word starting at or after p
        max_goal = max(goals)
        # Pre-draw every random number one span can need: n (span length) and l_ctx fraction.
        draws = torch.rand(B, len(bounds), max_goal + 1, 2, generator=g)
        n_draw = (draws[..., 0, None] > self._cdf[:-1]).sum(-1) + 1  # inverse CDF of p(n) ∝ 1/n
        n_draw, u_draw = n_draw.tolist(), draws[..., 1].tolist()
        ratio = self.mask_alpha / self.mask_beta
        next_l = next_word.tolist()
        flat_starts = torch.nonzero(starts)[:, 1].tolist()  # word-start positions, row after row
        word_pos, offset = [], 0
        for count in starts.sum(1).tolist():
            word_pos.append(flat_starts[offset:offset + count])
            offset += count
        ccum = torch.zeros(B, L + 1, dtype=torch.long)
        torch.cumsum(cand, 1, out=ccum[:, 1:])  # candidates before each position
        # End of the last candidate + 1 per row, so spans never run into trailing padding.
        last_l = (torch.where(cand, torch.arange(L), -1).amax(1) + 1).tolist()
        ccum_l = ccum.tolist()
        span_lo, span_hi = [], []  # flat [start, stop) of every span, in B * (L + 1) coordinates
        for b in range(B):
            ws, nxt, cc, base = word_pos[b], next_l[b], ccum_l[b], b * (L + 1)
            nw = len(ws)
            for k, (lo, hi) in enumerate(bounds):
                hi = min(hi, max(last_l[b], lo))
                goal, num, cur, step = goals[k], 0, lo, 0
                ns, us = n_draw[b][k], u_draw[b][k]
                while cur < hi and num < goal:
                    n = min(ns[step], goal - num)  # span length in words
                    ctx = int(n * ratio)  # context window around the span
                    l_ctx = int(us[step] * ctx)
                    step += 1
                    beg = cur + l_ctx
                    if beg >= hi:
                        break
                    w = nxt[beg]  # the span starts at the first word start at or after `beg`
                    if w >= nw or ws[w] >= hi:
                        break
                    p = ws[w]
                    stop = ws[w + n] if w + n < nw and ws[w + n] < hi else hi
                    count = cc[stop] - cc[p]
                    if num + count > goal:  # cut the span so that the row gets exactly `goal`
                        need = goal - num
                        if count == stop - p:
                            stop = p + need
                        else:  # the span crosses a special token: walk to the need-th candidate
                            stop = p
                            while cc[stop] - cc[p] < need:
                                stop += 1
                        count = need
                    span_lo.append(base + p)
                    span_hi.append(base + stop)
                    num += count
                    cur = stop + (ctx - l_ctx)
        # Mark spans with a difference array: +1 at each start, -1 at each stop, then cumsum.
        diff = torch.zeros(B * (L + 1), dtype=torch.int32)
        if span_lo:
            diff.index_put_((torch.tensor(span_lo),), torch.ones(len(span_lo), dtype=torch.int32), accumulate=True)
            diff.index_put_((torch.tensor(span_hi),), torch.full((len(span_hi),), -1, dtype=torch.int32),
                            accumulate=True)
        is_masked = (diff.view(B, L + 1).cumsum(1)[:, :L] > 0) & cand  # (B, L)
        # Top up with single random positions until each block has exactly its goal (or all candidates).
        for k, (lo, hi) in enumerate(bounds):
            free = cand & ~is_masked
            free[:, :lo] = False
            free[:, hi:] = False
            deficit = goals[k] - is_masked[:, lo:hi].sum(1)  # (B,)
            most = int(deficit.max())
            if most <= 0:
                continue
            score = torch.rand(B, L, generator=g).masked_fill_(~free, 2.0)
            val, idx = score.topk(most, dim=1, largest=False)  # (B, most) random free positions
            take = (torch.arange(most)[None, :] < deficit[:, None]) & (val < 2.0)
            is_masked.view(-1)[(idx + torch.arange(B)[:, None] * L)[take]] = True
        return is_masked

    def _ranks(self, B: int, L: int, g) -> torch.Tensor:
        """(B, L) rank of each position in the factorization order (chunks kept in order)."""
        pos = torch.arange(L)
        if self.reuse_len:
            R = self.reuse_len
            size0 = self.perm_size or R
            size1 = self.perm_size or (L - R)
            chunk = torch.where(pos < R, pos // size0, (R + size0 - 1) // size0 + (pos - R) // size1)
        else:
            chunk = pos // (self.perm_size or L)
        key = chunk.float() + 0.5 * torch.rand(B, L, generator=g)  # chunks in order, random inside
        order = key.argsort(1)
        return torch.empty_like(order).scatter_(1, order, pos.expand(B, L))

    # ------------------------------------------------------------------ call
    def __call__(self, examples) -> dict[str, torch.Tensor]:
        with intra_op_threads(self.num_threads):
            return self._collate(examples)

    def _collate(self, examples) -> dict[str, torch.Tensor]:
        g = self._rng()
        cols = read_features(examples)
        input_ids, real = pad_ragged(
            cols["input_ids"], self.pad_token_id, length=self.seq_len, left=self.left_pad,
            pad_to_multiple_of=None if self.seq_len else self.pad_to_multiple_of,
        )  # (B, L)
        B, L = input_ids.shape
        if "attention_mask" in cols:
            given, _ = pad_ragged(cols["attention_mask"], 0, length=L, left=self.left_pad)
            real &= given.bool()
        if self.seq_len is None:
            self._check_blocks(L)
        if self.bi_data and B % 2:
            raise ValueError(f"bi_data=True needs an even batch size (forward + backward halves), got {B}.")
        num_predict = self.num_predict or max(1, int(L * self.mask_beta / self.mask_alpha))
        if num_predict > L:
            raise ValueError(
                f"num_predict={num_predict} is larger than possible: the batch is only {L} tokens long. "
                "Lower num_predict or pass longer sequences / seq_len."
            )
        special = torch.isin(input_ids, self.special_ids) | ~real
        cand = ~special  # (B, L) positions that may become targets
        empty = ~cand.any(1)
        if bool(empty.any()):
            raise ValueError(
                f"Example(s) {torch.nonzero(empty).flatten().tolist()} have no token that can be predicted "
                "(only special or pad tokens): the sequence is too short. Filter out empty texts or "
                "concatenate documents into longer sequences."
            )
        if "token_type_ids" in cols:
            token_type_ids, _ = pad_ragged(cols["token_type_ids"], 0, length=L, left=self.left_pad)
        else:
            token_type_ids = xlnet_token_type_ids(input_ids, real, self.sep_token_id, self.cls_token_id)
        if "word_ids" in cols:
            wid = _word_ids_tensor(cols["word_ids"], L, self.left_pad)
            starts = word_starts(special, word_ids=wid)
        else:
            starts = word_starts(special, word_ids=None) & self.word_start_table[input_ids]
            prev_special = torch.ones_like(special)
            prev_special[:, 1:] = special[:, :-1]
            starts |= cand & prev_special  # a segment's first token always starts a word

        if self.reuse_len:
            R = self.reuse_len
            goal0 = num_predict * R // L
            bounds, goals = [(0, R), (R, L)], [goal0, num_predict - goal0]
        else:
            bounds, goals = [(0, L)], [num_predict]
        is_masked = self._sample_targets(starts, cand, goals, bounds, g)  # (B, L)

        if self.bi_data:  # backward half: reverse every segment's text (targets move with their tokens)
            rows = torch.arange(B) >= B // 2
            text = real & (input_ids != self.sep_token_id) & (input_ids != self.cls_token_id)
            src = _reverse_segments(text, rows)
            input_ids = input_ids.gather(1, src)
            is_masked = is_masked.gather(1, src)
            token_type_ids = token_type_ids.gather(1, src)

        # perm_mask from ranks: r_i = rank if i is a target else -1; c_j = rank if j is a target,
        # -2 if j is a visible non-target, L+1 if j is padding. i may attend to j iff c_j < r_i.
        rank = self._ranks(B, L, g)
        r = torch.where(is_masked, rank, torch.full_like(rank, -1))
        c = torch.where(is_masked, rank, torch.full_like(rank, -2))
        c = torch.where(real, c, torch.full_like(rank, L + 1))
        perm_mask = torch.empty(B, L, L)
        torch.ge(c.float()[:, None, :], r.float()[:, :, None], out=perm_mask)  # (B, L, L), written as float in one pass
        if self.reuse_len:
            perm_mask[:, : self.reuse_len, self.reuse_len :] = 1.0  # memory must not know the future block

        # target_mapping: targets in position order, zero rows beyond each row's count.
        counts = is_masked.sum(1, keepdim=True)  # (B, 1)
        if bool((counts == num_predict).all()):  # usual case: nonzero lists targets in position order
            idx = torch.nonzero(is_masked)[:, 1].view(B, num_predict)
        else:
            pos = torch.arange(L)
            idx = torch.where(is_masked, pos, pos + L).argsort(1)[:, :num_predict]  # (B, num_predict)
        valid = torch.arange(num_predict)[None, :] < counts  # (B, num_predict)
        target_mapping = torch.zeros(B, num_predict, L)
        target_mapping.scatter_(2, idx[..., None], valid[..., None].float())
        labels = torch.where(valid, input_ids.gather(1, idx), torch.full_like(idx, IGNORE_INDEX))

        batch = {
            "input_ids": input_ids,
            "perm_mask": perm_mask,
            "target_mapping": target_mapping,
            "labels": labels,
            "token_type_ids": token_type_ids,
            "attention_mask": real.long(),
        }
        if self.return_is_masked:
            batch["is_masked"] = is_masked
        return batch
