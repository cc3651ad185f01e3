"""BART text infilling: exactly round(0.3 L) tokens masked per row, every masked run replaced by masks
(one per span, zero-length spans inserting one), kept tokens in order, Poisson(3) span statistics, labels
= the text, sentence permutation keeps each sentence whole, seeding, the `bart` tokenizer, and clear errors."""

import numpy as np
import pytest
import torch

from hf_xfmr.bench.bart_collator import text_infilling_per_example
from hf_xfmr.data import DataCollatorForTextInfilling, train_tokenizer
from hf_xfmr.data.bart import masked_counts, permute_sentences

BOS, PAD, EOS, MASK = 0, 1, 2, 4
IDS = dict(mask_token_id=MASK, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS)


def collator(**kwargs):
    return DataCollatorForTextInfilling(**{**IDS, **kwargs})


def rows_of(batch):
    """Per row: (corrupted text without <s> </s> and padding, label text without <s> </s> and -100)."""
    out = []
    for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
        x = ids[mask.bool()].tolist()
        y = labels[labels != -100].tolist()
        assert x[0] == BOS and x[-1] == EOS and y[0] == BOS and y[-1] == EOS
        out.append((x[1:-1], y[1:-1]))
    return out


def explain(corrupted, text):
    """Check that `corrupted` is `text` with spans replaced by one mask each (texts of distinct ids, none
    equal to MASK); returns (masked tokens, masks, zero-length spans seen)."""
    position, masks, zero_spans, pending = 0, 0, 0, 0
    index = {token: i for i, token in enumerate(text)}
    for token in corrupted + [None]:
        if token == MASK:
            masks += 1
            pending += 1
            continue
        target = len(text) if token is None else index[token]
        gap = target - position  # masked tokens between the previous kept token and this one
        assert gap >= 0, "kept tokens out of order"
        assert gap == 0 or pending >= 1, "a masked run without a mask"
        if gap == 0:
            zero_spans += pending  # masks between adjacent kept tokens: insertions
        position = target + 1
        pending = 0
    masked = len(text) - (len(corrupted) - masks)
    return masked, masks, zero_spans


def test_masked_count_and_structure_on_many_draws():
    torch.manual_seed(0)
    c = collator(seed=1)
    lengths = [2, 3, 7, 20, 64, 200, 511]
    zero_spans, masks, masked = 0, 0, 0
    for _ in range(30):
        examples = [{"input_ids": list(range(10, 10 + n))} for n in lengths]
        batch = c(examples)
        for (corrupted, text), n in zip(rows_of(batch), lengths):
            assert text == list(range(10, 10 + n))
            row_masked, row_masks, row_zero = explain(corrupted, text)
            assert row_masked == max(round(0.3 * n), 1)
            assert row_masks >= 1
            zero_spans, masks, masked = zero_spans + row_zero, masks + row_masks, masked + row_masked
    # Poisson(3) lengths: about masked / 3 spans (the last of each row is cut short); P(0) = e^-3 ~ 5% insertions
    assert 0.28 < masks / masked < 0.42
    assert 0.01 < zero_spans / masks < 0.12


def test_span_lengths_follow_poisson_3():
    """Adjacent masks are ambiguous, so the run lengths are read where each mask stands alone."""
    c = collator(seed=3)
    text = list(range(10, 1010))
    runs = []
    for _ in range(20):
        (corrupted, _), = rows_of(c([{"input_ids": text}]))
        kept = [t for t in corrupted if t != MASK]
        for i in range(1, len(corrupted) - 1):
            a, m, b = corrupted[i - 1], corrupted[i], corrupted[i + 1]
            if m == MASK and a != MASK and b != MASK:
                runs.append(b - a - 1)
        assert len(kept) == 700
    runs = np.array(runs)
    assert abs(runs.mean() - 3.0) < 0.35  # Poisson(3): mean 3
    assert abs((runs == 0).mean() - np.exp(-3)) < 0.04


def test_labels_mask_and_padding():
    batch = collator(seed=0)([{"input_ids": list(range(10, 30))}, {"input_ids": list(range(40, 45))}])
    assert batch["labels"].shape == (2, 22)
    assert batch["labels"][1, 7:].eq(-100).all()
    lengths = batch["attention_mask"].sum(1)
    assert batch["input_ids"].shape[1] == int(lengths.max())
    for row, n in enumerate(lengths.tolist()):
        assert (batch["input_ids"][row, n:] == PAD).all() and batch["input_ids"][row, n - 1] == EOS
    no_bos = collator(seed=0, bos_token_id=None)
    no_bos.bos_token_id = None
    out = no_bos([{"input_ids": [7, 8, 9]}])
    assert out["labels"].tolist() == [[7, 8, 9, EOS]]


def test_seeded_batches_repeat_and_differ_from_another_seed():
    examples = [{"input_ids": list(range(10, 110))} for _ in range(4)]
    a, b, other = collator(seed=5)(examples), collator(seed=5)(examples), collator(seed=6)(examples)
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert not torch.equal(a["input_ids"], other["input_ids"])
    torch.manual_seed(0)
    c = collator()(examples)
    torch.manual_seed(0)
    assert torch.equal(collator()(examples)["input_ids"], c["input_ids"])


def test_sentence_permutation_keeps_sentences_whole():
    rng = np.random.default_rng(0)
    ids = np.array([[10, 11, 5, 12, 5, 13, 14, 15, 5, 16], [20, 21, 5, 22, 23, 1, 1, 1, 1, 1]])
    lengths = np.array([10, 5])
    moved = 0
    for _ in range(20):
        out = permute_sentences(ids, lengths, np.array([5]), rng)
        assert _is_shuffle(out[0].tolist(), [(10, 11, 5), (12, 5), (13, 14, 15, 5), (16,)])
        assert _is_shuffle(out[1, :5].tolist(), [(20, 21, 5), (22, 23)])
        assert (out[1, 5:] == 1).all()
        moved += out[0].tolist() != ids[0].tolist()
    assert moved > 10
    # through the collator: labels stay the original text, the input holds the shuffled sentences
    c = collator(seed=0, permute_sentences=True, sentence_end_ids=[5], mask_ratio=0.01)
    text = [10, 11, 5, 12, 5, 13, 14, 15, 5, 16] * 10
    batch = c([{"input_ids": text}])
    assert batch["labels"][0, 1:-1].tolist() == text


def _is_shuffle(tokens, sentences):
    """`tokens` is the sentences, each whole, in some order."""
    if not tokens:
        return not sentences
    return any(tuple(tokens[:len(s)]) == s and _is_shuffle(tokens[len(s):], sentences[:i] + sentences[i + 1:])
               for i, s in enumerate(sentences))


def test_per_example_baseline_has_the_same_invariants():
    g = torch.Generator().manual_seed(0)
    examples = [{"input_ids": list(range(10, 10 + n))} for n in (5, 50, 300)]
    batch = text_infilling_per_example(examples, MASK, BOS, EOS, PAD, generator=g)
    for (corrupted, text), n in zip(rows_of(batch), (5, 50, 300)):
        assert explain(corrupted, text)[0] == masked_counts(np.array([n]), 0.3)[0]


def test_bart_tokenizer_style_and_its_mask_token():
    tokenizer = train_tokenizer("bart", ["a small corpus of text. it has two sentences."] * 20, vocab_size=300)
    assert tokenizer.mask_token == "<mask>"
    c = DataCollatorForTextInfilling(tokenizer, seed=0)
    batch = c([{"input_ids": tokenizer("a small corpus of text", add_special_tokens=False)["input_ids"] * 3}])
    assert (batch["input_ids"] == tokenizer.mask_token_id).any()
    assert batch["labels"][0, 0] == tokenizer.bos_token_id and batch["input_ids"][0, 0] == tokenizer.bos_token_id


@pytest.mark.parametrize("kwargs,message", [
    (dict(mask_ratio=0.0), "mask_ratio"),
    (dict(mask_ratio=1.0), "mask_ratio"),
    (dict(mask_ratio=True), "mask_ratio"),
    (dict(poisson_lambda=0), "poisson_lambda"),
    (dict(poisson_lambda=-1.0), "poisson_lambda"),
    (dict(mask_token_id=None), "mask_token_id"),
    (dict(permute_sentences=True), "sentence_end_ids"),
    (dict(mask_token_id=500, vocab_size=300), "mask_token_id"),
])
def test_bad_settings_fail_clearly(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataCollatorForTextInfilling(**{**IDS, **kwargs})


def test_too_short_text_and_a_mask_id_that_is_real_text_fail_clearly():
    with pytest.raises(ValueError, match="too short"):
        collator()([{"input_ids": [7, 8, 9]}, {"input_ids": [7]}])
    tokenizer = train_tokenizer("bart", ["some text to train on."] * 20, vocab_size=300)
    with pytest.raises(ValueError, match="mask_token_id=.*real vocabulary entry"):
        DataCollatorForTextInfilling(tokenizer, mask_token_id=100)
