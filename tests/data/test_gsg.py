"""PEGASUS gap-sentence generation: on many random documents the gap sentences are whole sentences, m =
round(ratio * n) of them per document, the targets are exactly the gap sentences in document order, the input keeps
every other sentence in order, and the chosen sentences are the best by a brute-force ROUGE-1 (every strategy);
sentence splitting and windows of whole sentences on real text; seeding, one-sentence rows, clear errors."""

import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
import torch

from hf_xfmr.data import train_tokenizer
from hf_xfmr.data.gsg import (
    STRATEGIES,
    DataCollatorForGapSentences,
    gap_counts,
    gsg_examples,
    rouge_units,
    sentence_scores,
    sentence_spans,
    tokenize_sentences,
)

from ..doc_snippets import snippet

BOS, PAD, EOS, MASK, SEP = 0, 1, 2, 4, 5
IDS = dict(mask_token_id=MASK, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS)
WORDS = range(10, 30)  # a small vocabulary: sentences share unigrams


def collator(**kwargs):
    return DataCollatorForGapSentences(**{**IDS, **kwargs})


def random_document(rng: random.Random, max_sentences: int = 12) -> list[list[int]]:
    return [[rng.choice(WORDS) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, max_sentences))]


def as_example(sentences):
    return {"input_ids": [t for s in sentences for t in s], "sentence_lengths": [len(s) for s in sentences]}


def parse(batch, documents):
    """Per row: the sentences the input replaced by a mask, after checking that the input is [BOS] + each sentence
    either whole or as one mask, in order + [EOS], and that the labels are [BOS] + the masked sentences + [EOS]."""
    chosen = []
    for ids, mask, labels, sentences in zip(batch["input_ids"], batch["attention_mask"], batch["labels"], documents):
        x = ids[mask.bool()].tolist()
        assert x[0] == BOS and x[-1] == EOS and (ids[~mask.bool()] == PAD).all()
        x, position, gaps = x[1:-1], 0, []
        for index, sentence in enumerate(sentences):
            if x[position] == MASK:
                gaps.append(index)
                position += 1
            else:
                assert x[position:position + len(sentence)] == sentence, "an unselected sentence changed"
                position += len(sentence)
        assert position == len(x), "the input holds more than the sentences"
        y = labels[labels != -100].tolist()
        assert y == [BOS] + [t for i in gaps for t in sentences[i]] + [EOS]
        assert (labels[len(y):] == -100).all()
        chosen.append(gaps)
    return chosen


def f1(candidate: list[int], reference: list[int], uniq: bool) -> Fraction:
    """ROUGE-1 F1 by the definition: clipped unigram overlap, precision over the candidate, recall over the
    reference (sets of unigrams with `uniq`)."""
    c, r = Counter(candidate), Counter(reference)
    if uniq:
        c, r = Counter(set(candidate)), Counter(set(reference))
    overlap = sum(min(n, r[u]) for u, n in c.items())
    if overlap == 0:
        return Fraction(0)
    precision, recall = Fraction(overlap, sum(c.values())), Fraction(overlap, sum(r.values()))
    return 2 * precision * recall / (precision + recall)


def brute_force_gaps(sentences, m: int, strategy: str) -> list[int]:
    n, uniq = len(sentences), strategy.endswith("uniq")
    if strategy == "lead":
        return list(range(m))

    def score(chosen, i):
        picked = set(chosen) | {i}
        return f1([t for j in sorted(picked) for t in sentences[j]],
                  [t for j in range(n) if j not in picked for t in sentences[j]], uniq)
    if strategy.startswith("ind"):
        return sorted(sorted(range(n), key=lambda i: (-score([], i), i))[:m])
    chosen = []
    for _ in range(m):
        chosen.append(max((i for i in range(n) if i not in chosen), key=lambda i: (score(chosen, i), -i)))
    return sorted(chosen)


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "random"])
@pytest.mark.parametrize("ratio", [0.15, 0.3, 0.45])
def test_gaps_are_whole_sentences_counted_and_the_best_by_rouge(strategy, ratio):
    rng = random.Random(f"{strategy}-{ratio}")
    c = collator(gsg_ratio=ratio, strategy=strategy)
    for _ in range(25):
        documents = [random_document(rng) for _ in range(6)]
        chosen = parse(c([as_example(d) for d in documents]), documents)
        for gaps, sentences in zip(chosen, documents):
            n = len(sentences)
            m = min(n, max(1, round(ratio * n))) if n >= 2 else round(ratio * n)
            assert len(gaps) == m
            assert gaps == brute_force_gaps(sentences, m, strategy)


def test_random_strategy_counts_seeding_and_coverage():
    rng = random.Random(0)
    documents = [random_document(rng) for _ in range(8)]
    examples = [as_example(d) for d in documents]
    a = collator(strategy="random", seed=3)(examples)
    assert all(torch.equal(a[k], collator(strategy="random", seed=3)(examples)[k]) for k in a)
    assert not torch.equal(a["input_ids"], collator(strategy="random", seed=4)(examples)["input_ids"])
    torch.manual_seed(0)
    b = collator(strategy="random")(examples)
    torch.manual_seed(0)
    assert torch.equal(b["labels"], collator(strategy="random")(examples)["labels"])
    # Every sentence is chosen sometimes: a uniform draw, m = round(0.3 n) each time.
    seen = Counter()
    c = collator(strategy="random", seed=0)
    document = [[10 + i] * 3 for i in range(10)]
    for _ in range(200):
        gaps, = parse(c([as_example(document)]), [document])
        assert len(gaps) == 3
        seen.update(gaps)
    assert set(seen) == set(range(10)) and min(seen.values()) > 30


def test_deterministic_strategies_do_not_depend_on_the_seed():
    rng = random.Random(1)
    examples = [as_example(random_document(rng)) for _ in range(5)]
    for strategy in ("ind-orig", "seq-orig"):
        a = collator(strategy=strategy, seed=0)(examples)
        b = collator(strategy=strategy, seed=99)(examples)
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_scores_equal_brute_force_rouge():
    rng = random.Random(2)
    documents = [random_document(rng, 15) for _ in range(10)]
    width = max(sum(map(len, d)) for d in documents)
    units = np.full((len(documents), width), -1)
    sentence = np.zeros((len(documents), width), dtype=np.int64)
    for row, d in enumerate(documents):
        flat = [t for s in d for t in s]
        units[row, :len(flat)] = flat
        sentence[row, :len(flat)] = [i for i, s in enumerate(d) for _ in s]
    num_sentences = np.array([len(d) for d in documents])
    for uniq in (False, True):
        scores = sentence_scores(units, sentence, num_sentences, uniq=uniq)
        for row, d in enumerate(documents):
            rest = [[t for j, s in enumerate(d) if j != i for t in s] for i in range(len(d))]
            expected = [float(f1(s, rest[i], uniq)) for i, s in enumerate(d)]
            np.testing.assert_allclose(scores[row, :len(d)], expected, rtol=0, atol=1e-12)
            assert (scores[row, len(d):] == 0).all()


def test_counts_and_one_sentence_rows():
    n = np.array([0, 1, 2, 3, 4, 5, 7, 10, 15, 100])
    assert gap_counts(n, 0.3).tolist() == [0, 0, 1, 1, 1, 2, 2, 3, 4, 30]
    assert gap_counts(n, 0.9).tolist() == [0, 1, 2, 3, 4, 4, 6, 9, 14, 90]
    # One sentence: at 0.3 nothing is masked (the target is EOS alone); above 0.5 the sentence is the target.
    kept = collator()([as_example([[11, 12, 13]])])
    assert kept["input_ids"].tolist() == [[BOS, 11, 12, 13, EOS]] and kept["labels"].tolist() == [[BOS, EOS]]
    masked = collator(gsg_ratio=0.6)([as_example([[11, 12, 13]])])
    assert masked["input_ids"].tolist() == [[BOS, MASK, EOS]] and masked["labels"].tolist() == [[BOS, 11, 12, 13, EOS]]


@pytest.mark.parametrize("strategy", ["ind-orig", "seq-uniq"])
def test_rows_without_any_unigram_take_the_first_sentences(strategy):
    """Punctuation only (no unigram): every score is 0 and ties go to the earlier sentences."""
    document = [[10, 11], [12], [13, 14, 15], [16], [17, 18]]
    batch = collator(strategy=strategy, gsg_ratio=0.4, units=np.full(40, -1))([as_example(document)])
    assert parse(batch, [document]) == [[0, 1]]


def test_adjacent_gaps_get_a_mask_each_and_the_separator_option():
    # "lead" at ratio 0.4: m = round(1.6) = 2 of 4, the first two, adjacent.
    document = [[10, 11, 12], [10, 11, 13], [20], [10, 11, 12, 13, 21]]
    batch = collator(gsg_ratio=0.4, strategy="lead")([as_example(document)])
    assert batch["input_ids"].tolist() == [[BOS, MASK, MASK, 20, 10, 11, 12, 13, 21, EOS]]
    separated = collator(gsg_ratio=0.4, strategy="lead", target_separator_id=SEP)([as_example(document)])
    assert separated["labels"].tolist() == [[BOS, 10, 11, 12, SEP, 10, 11, 13, EOS]]
    assert collator(gsg_ratio=0.4, strategy="lead", bos_token_id=None)([as_example(document)])["labels"].tolist() \
        == [[10, 11, 12, 10, 11, 13, EOS]]


def test_padding_of_a_ragged_batch():
    documents = [[[10, 11], [12, 13, 14], [15]], [[20] * 9, [21] * 9, [22] * 9, [23] * 9, [24] * 9]]
    batch = collator()([as_example(d) for d in documents])
    parse(batch, documents)
    lengths = batch["attention_mask"].sum(1)
    assert batch["input_ids"].shape[1] == int(lengths.max())
    assert batch["labels"].shape[0] == 2 and (batch["labels"] >= -100).all()


@pytest.fixture(scope="module")
def bart_tok(corpus):
    return train_tokenizer("bart", corpus[:60], vocab_size=500)


def test_sentence_spans():
    text = ("  First one. Second one!\n\nA list:\n- item one\n- item two\nVersion 3.11 is out. e.g. this stays. "
            "\"Quoted.\"")
    assert [text[a:b] for a, b in sentence_spans(text)] == [
        "First one.", "Second one!", "A list:", "- item one", "- item two", "Version 3.11 is out. e.g. this stays.",
        "\"Quoted.\""]
    assert sentence_spans("   \n ") == [] and sentence_spans("no end") == [(0, 6)]


def test_tokenized_sentences_are_the_document_cut_at_boundaries(bart_tok, texts):
    documents = tokenize_sentences(bart_tok, texts[:30])
    whole = bart_tok(texts[:30], add_special_tokens=False)["input_ids"]
    for text, sentences, ids in zip(texts[:30], documents, whole):
        assert [t for s in sentences for t in s] == ids
        spans = sentence_spans(text)
        assert len(sentences) == len(spans)  # no sentence without a token in this text
        for sentence, (start, end) in zip(sentences, spans):
            assert bart_tok.decode(sentence).strip() == text[start:end]


def test_windows_hold_whole_consecutive_sentences(bart_tok, texts):
    documents = tokenize_sentences(bart_tok, texts[:30])
    for max_tokens in (12, 40, 126):
        examples = gsg_examples(bart_tok, texts[:30], max_tokens)
        assert examples
        pieces = [[s[i:i + max_tokens] for s in d for i in range(0, len(s), max_tokens)] for d in documents]
        for example in examples:
            lengths = example["sentence_lengths"]
            assert len(lengths) >= 2 and sum(lengths) == len(example["input_ids"]) <= max_tokens
            starts = np.cumsum([0] + lengths)
            window = [example["input_ids"][a:b] for a, b in zip(starts[:-1], starts[1:])]
            # consecutive sentences (or pieces of an over-long one) of one document
            assert any(window == d[i:i + len(window)] for d in pieces for i in range(len(d)))
    with pytest.raises(ValueError, match="max_tokens=1"):
        gsg_examples(bart_tok, texts[:2], 1)


def test_real_text_through_the_collator(bart_tok, texts):
    examples = gsg_examples(bart_tok, texts[:40], 62)
    c = DataCollatorForGapSentences(bart_tok)
    assert (c.mask_token_id, c.bos_token_id, c.eos_token_id) == (bart_tok.mask_token_id, bart_tok.bos_token_id,
                                                                  bart_tok.eos_token_id)
    for start in range(0, len(examples), 16):
        chunk = examples[start:start + 16]
        batch = c(chunk)
        assert batch["input_ids"].shape[1] <= 64 and batch["labels"].shape[1] <= 64
        for row, example in enumerate(chunk):
            n = len(example["sentence_lengths"])
            masks = int((batch["input_ids"][row] == bart_tok.mask_token_id).sum())
            assert masks == max(1, round(0.3 * n))
            ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
            target = batch["labels"][row][batch["labels"][row] != -100].tolist()
            assert ids[0] == target[0] == bart_tok.bos_token_id and ids[-1] == target[-1] == bart_tok.eos_token_id
            assert len(ids) - 2 - masks + len(target) - 2 == len(example["input_ids"])  # every token in one of them


def test_rouge_units_of_a_tokenizer(bart_tok):
    units = rouge_units(bart_tok)
    assert len(units) == len(bart_tok)
    vocab = bart_tok.get_vocab()
    # a word with and without its leading space, and capitalised: one unigram
    same = [(w, "Ġ" + w) for w in vocab if w.isalpha() and "Ġ" + w in vocab]
    same += [("Ġ" + w, "Ġ" + w.capitalize()) for w in vocab if w.isalpha() and w.islower() and "Ġ" + w in vocab
             and "Ġ" + w.capitalize() in vocab]
    assert len(same) > 20 and all(units[vocab[a]] == units[vocab[b]] >= 0 for a, b in same)
    assert units[vocab["Ġthe"]] != units[vocab["Ġin"]]
    assert units[vocab["."]] == units[vocab[","]] == units[vocab["Ġ("]] == -1
    assert all(units[i] == -1 for i in bart_tok.all_special_ids)


def test_a_pegasus_tokenizer_masks_sentences_with_its_sentence_mask():
    """PEGASUS's tokenizer has two masks: `<mask_1>` (mask_token_sent) for gap sentences, `<mask_2>` (mask_token)
    for words; no <s>."""
    from transformers import PegasusTokenizer

    special = [(p, 0.0) for p in ("<pad>", "</s>", "<mask_1>", "<mask_2>", "<unk>")]
    words = [(p, -1.0 - i) for i, p in enumerate(["▁the", "▁cat", "▁sat", "▁it", "▁ran", "."])]
    tokenizer = PegasusTokenizer(vocab=special + words)
    sentence_mask = tokenizer.convert_tokens_to_ids("<mask_1>")
    assert sentence_mask != tokenizer.mask_token_id
    c = DataCollatorForGapSentences(tokenizer, strategy="lead")
    assert (c.mask_token_id, c.bos_token_id) == (sentence_mask, None)
    examples = gsg_examples(tokenizer, ["the cat sat.\nit ran.\nthe cat ran."], max_tokens=20)
    batch = c(examples)
    assert batch["input_ids"][0].tolist()[:2] == [sentence_mask, tokenizer.convert_tokens_to_ids("▁it")]
    assert batch["labels"][0].tolist() == tokenizer("the cat sat.")["input_ids"]  # the sentence + </s>


def test_clear_errors(bart_tok):
    with pytest.raises(ValueError, match="gsg_ratio=1.5 must lie in"):
        collator(gsg_ratio=1.5)
    with pytest.raises(ValueError, match="Unknown gap-sentence strategy 'best'"):
        collator(strategy="best")
    with pytest.raises(ValueError, match="need `sentence_lengths`"):
        collator()([{"input_ids": [10, 11]}])
    with pytest.raises(ValueError, match="Example 1: its sentence_lengths sum to 3 but it has 2 input_ids"):
        collator()([as_example([[10], [11]]), {"input_ids": [10, 11], "sentence_lengths": [1, 2]}])
    with pytest.raises(ValueError, match="must be positive"):
        collator()([{"input_ids": [10, 11], "sentence_lengths": [0, 2]}])
    with pytest.raises(ValueError, match="needs `mask_token_id`"):
        DataCollatorForGapSentences(pad_token_id=PAD, eos_token_id=EOS)
    with pytest.raises(ValueError, match="not a special mask token"):
        DataCollatorForGapSentences(bart_tok, mask_token_id=bart_tok.convert_tokens_to_ids("Ġthe"))


def test_docs_snippet(capsys):
    namespace = {}
    exec(snippet("DataCollatorForGapSentences", "docs/pretraining.md"), namespace)
    tokenizer, batch = namespace["tokenizer"], namespace["batch"]
    assert batch["labels"].shape[0] == 2
    shown = capsys.readouterr().out  # what the snippet's comments say it prints
    assert shown.startswith("<s><mask> It was a sunny day.<mask> Then it rained. The cat left the mat.</s>")
    assert "<s>The cat sat on the mat. The cat liked the mat.</s>" in shown
