"""T5 span corruption: T5's lengths, exact noise counts, inputs + targets reconstruct the text, sentinels
counted down from the end of the vocabulary, EOS, no padding for rows of one length, agreement with a
per-example implementation, the `t5` tokenizer style, and clear errors."""

import pytest
import torch

from hf_xfmr.data import train_tokenizer
from hf_xfmr.data.t5 import (
    DataCollatorForSpanCorruption,
    compute_input_and_target_lengths,
    corrupt_spans,
    corrupted_lengths,
    random_spans_noise_mask,
)

VOCAB, EOS, PAD = 1000, 1, 0


def corrupt_one(ids, noise, sentinel_start, eos):
    """Per-example reference: walk the tokens, open a sentinel at each span start."""
    inputs, targets, spans = [], [], 0
    for i, (token, is_noise) in enumerate(zip(ids, noise)):
        starts = i == 0 or bool(noise[i - 1]) != bool(is_noise)
        if is_noise:
            if starts:
                inputs.append(sentinel_start - spans)
                spans += 1
            targets.append(token)
        else:
            if starts:
                targets.append(sentinel_start - spans)
            inputs.append(token)
    return inputs + [eos], targets + [eos]


def reconstruct(inputs, targets, sentinel_start, num_sentinels=100):
    """Put each target span back in place of its sentinel: the original text."""
    is_sentinel = lambda t: sentinel_start - num_sentinels < t <= sentinel_start  # noqa: E731
    spans, current = {}, None
    for token in targets[:-1]:
        if is_sentinel(token):
            current = token
            spans[current] = []
        elif current is not None:
            spans[current].append(token)
    text = []
    for token in inputs[:-1]:
        text.extend(spans[token] if is_sentinel(token) else [token])
    return text


def test_lengths_follow_t5():
    assert compute_input_and_target_lengths(512) == (568, 114)  # T5's pretraining setup
    assert compute_input_and_target_lengths(462) == (512, 104)
    for wanted in (8, 20, 64, 100, 462):
        tokens, target = compute_input_and_target_lengths(wanted)
        assert corrupted_lengths(tokens) == (wanted, target) or corrupted_lengths(tokens)[0] <= wanted
        assert corrupted_lengths(tokens + 1)[0] > wanted


@pytest.mark.parametrize("length", [4, 20, 97, 568])
def test_invariants_on_many_draws(length):
    collator = DataCollatorForSpanCorruption(vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD, seed=0)
    g = torch.Generator().manual_seed(length)
    expected_inputs, expected_targets = corrupted_lengths(length)
    num_noise = min(max(round(length * 0.15), 1), length - 1)
    span_lengths = []
    for _ in range(20):
        text = torch.randint(2, VOCAB - 100, (8, length), generator=g)
        batch = collator([row.tolist() for row in text])
        assert batch["input_ids"].shape == (8, expected_inputs) and batch["labels"].shape == (8, expected_targets)
        assert batch["attention_mask"].all() and (batch["labels"] != -100).all()  # one length: no padding
        assert (batch["input_ids"][:, -1] == EOS).all() and (batch["labels"][:, -1] == EOS).all()
        for row in range(8):
            inputs, targets = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
            assert reconstruct(inputs, targets, VOCAB - 1) == text[row].tolist()
            sentinels = [t for t in inputs if t >= VOCAB - 100]
            assert sentinels == list(range(VOCAB - 1, VOCAB - 1 - len(sentinels), -1))  # <extra_id_0>, 1, ...
            assert targets[0] == VOCAB - 1 and inputs[0] < VOCAB - 100  # kept text first, noise last
            assert inputs[-2] == sentinels[-1]
            noise_tokens = len(targets) - 1 - len(sentinels)
            assert noise_tokens == num_noise
            span_lengths.append(noise_tokens / len(sentinels))
    if length >= 97:
        assert abs(sum(span_lengths) / len(span_lengths) - 3.0) < 0.25


def test_noise_mask_spans_are_random_compositions():
    noise = random_spans_noise_mask(4000, 40, generator=torch.Generator().manual_seed(0))
    assert (noise.sum(1) == 6).all() and not noise[:, 0].any() and noise[:, -1].all()
    starts = noise & ~torch.nn.functional.pad(noise[:, :-1], (1, 0), value=False)
    assert (starts.sum(1) == 2).all()
    # with 6 noise tokens in 2 spans, the first span length is uniform over 1..5
    first = torch.stack([row.nonzero()[:, 0] for row in starts])[:, 0]
    first_len = torch.tensor([int(noise[i, first[i]:].int().cumprod(0).sum()) for i in range(len(first))])
    counts = torch.bincount(first_len, minlength=6)[1:6].float() / len(first_len)
    assert (counts - 0.2).abs().max() < 0.03


def test_vectorised_equals_the_per_example_implementation():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(2, VOCAB - 100, (16, 120), generator=g)
    noise = random_spans_noise_mask(16, 120, generator=g)
    inputs, targets = corrupt_spans(ids, noise, VOCAB - 1, EOS)
    for row in range(16):
        a, b = corrupt_one(ids[row].tolist(), noise[row].tolist(), VOCAB - 1, EOS)
        assert inputs[row].tolist() == a and targets[row].tolist() == b


def test_seeded_and_rows_of_several_lengths_are_padded():
    make = lambda: DataCollatorForSpanCorruption(vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD, seed=5)  # noqa
    rows = [list(range(10, 50)), list(range(100, 120)), list(range(200, 240))]
    a, b = make()(rows), make()(rows)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert a["input_ids"].shape[1] == corrupted_lengths(40)[0]
    short_in, short_target = corrupted_lengths(20)
    assert a["attention_mask"][1].sum() == short_in and (a["input_ids"][1, short_in:] == PAD).all()
    assert (a["labels"][1, short_target:] == -100).all() and a["labels"][1, short_target - 1] == EOS


def test_t5_tokenizer_and_collator(corpus):
    tok = train_tokenizer("t5", corpus[:40], vocab_size=400)
    assert len(tok) <= 400
    assert tok.convert_ids_to_tokens(len(tok) - 1) == "<extra_id_0>"
    assert tok.convert_ids_to_tokens(len(tok) - 100) == "<extra_id_99>"
    assert tok("a b")["input_ids"][-1] == tok.eos_token_id and tok.pad_token_id == 0
    collator = DataCollatorForSpanCorruption(tok, seed=0)
    assert collator.num_sentinels == 100 and collator.sentinel_start == len(tok) - 1
    text = tok(" ".join(corpus[0]), add_special_tokens=False)["input_ids"][:60]
    batch = collator([text])
    pieces = tok.convert_ids_to_tokens(batch["labels"][0].tolist())
    assert pieces[0] == "<extra_id_0>" and pieces[-1] == "</s>"


@pytest.mark.parametrize("kwargs,message", [
    (dict(noise_density=0.0), "noise_density"),
    (dict(noise_density=1.0), "noise_density"),
    (dict(mean_noise_span_length=0.5), "mean_noise_span_length"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataCollatorForSpanCorruption(vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD, **kwargs)


def test_bad_inputs_and_colliding_sentinels(bert_tok):
    collator = DataCollatorForSpanCorruption(vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD, num_sentinels=3)
    with pytest.raises(ValueError, match="too short"):
        collator([[5]])
    with pytest.raises(ValueError, match="sentinel"):
        collator([list(range(10, 200))])  # needs 10 spans, 3 sentinels
    with pytest.raises(ValueError, match="real vocabulary entry"):
        DataCollatorForSpanCorruption(bert_tok, eos_token_id=3)
