"""MLM collator: rates, 80/10/10, special/pad never selected, whole words, n-gram spans, seeds."""

import pytest
import torch

from hf_xfmr.data import DataCollatorForMLM, tokenize_for_mlm


@pytest.fixture(scope="module")
def encoded(bert_tok, texts):
    enc = tokenize_for_mlm(bert_tok, texts[:64], max_length=96)
    return [{k: enc[k][i] for k in enc} for i in range(len(enc["input_ids"]))]


def run_many(collator, examples, draws=20, bs=16):
    outs = []
    for d in range(draws):
        start = (d * bs) % (len(examples) - bs)
        outs.append((examples[start:start + bs], collator(examples[start:start + bs])))
    return outs


def originals(examples, L, pad):
    return torch.tensor([e["input_ids"] + [pad] * (L - len(e["input_ids"])) for e in examples])


@pytest.mark.parametrize("p", [0.15, 0.30])
def test_rate_and_80_10_10(bert_tok, encoded, p):
    collator = DataCollatorForMLM(bert_tok, mlm_probability=p, seed=0)
    special_ids = torch.tensor(bert_tok.all_special_ids)
    sel = cand = n_mask = n_rand = n_keep = 0
    for ex, batch in run_many(collator, encoded):
        orig = originals(ex, batch["input_ids"].shape[1], bert_tok.pad_token_id)
        special = torch.isin(orig, special_ids)
        selected = batch["labels"] != -100
        assert not (selected & special).any(), "special/pad tokens must never be selected"
        assert torch.equal(batch["input_ids"][special], orig[special])
        assert torch.equal(batch["labels"][selected], orig[selected])
        assert torch.equal(batch["input_ids"][~selected], orig[~selected])
        got = batch["input_ids"][selected]
        assert not torch.isin(got[got != bert_tok.mask_token_id], special_ids).any(), "random ids must not be special"
        sel += int(selected.sum())
        cand += int((~special).sum())
        n_mask += int((got == bert_tok.mask_token_id).sum())
        n_keep += int((got == orig[selected]).sum())
        n_rand += int(((got != bert_tok.mask_token_id) & (got != orig[selected])).sum())
    rate = sel / cand
    assert abs(rate - p) < 4 * (p * (1 - p) / cand) ** 0.5 + 0.005
    assert abs(n_mask / sel - 0.8) < 0.03
    assert abs(n_rand / sel - 0.1) < 0.025
    assert abs(n_keep / sel - 0.1) < 0.025


def test_whole_word_masking(bert_tok, encoded):
    collator = DataCollatorForMLM(bert_tok, whole_word_mask=True, seed=1)
    sel = tok = 0
    multi = 0
    for ex, batch in run_many(collator, encoded):
        L = batch["labels"].shape[1]
        for e, lab in zip(ex, batch["labels"]):
            words = {}
            for i, w in enumerate(e["word_ids"]):
                if w >= 0:
                    words.setdefault(w, []).append(bool(lab[i] != -100))
            for flags in words.values():
                assert all(flags) or not any(flags), "a word was only partly masked"
                multi += len(flags) > 1 and all(flags)
            tok += sum(w >= 0 for w in e["word_ids"])
            sel += int((lab != -100).sum())
        assert L == max(len(e["input_ids"]) for e in ex)
    assert multi > 10, "no multi-token word was ever masked"
    assert abs(sel / tok - 0.15) < 0.02


def test_whole_word_from_offsets(bert_tok, texts):
    """With offsets a word is a run of tokens with no gap between them (whitespace-delimited)."""
    enc = bert_tok(texts[:32], truncation=True, max_length=64, return_offsets_mapping=True)
    ex = [{"input_ids": enc["input_ids"][i], "offset_mapping": enc["offset_mapping"][i]} for i in range(32)]
    batch = DataCollatorForMLM(bert_tok, whole_word_mask=True, seed=3)(ex)
    together = 0
    for e, lab in zip(ex, batch["labels"].tolist()):
        off = e["offset_mapping"]
        for i in range(2, len(off) - 1):  # skip [CLS] and [SEP]
            if off[i][0] == off[i - 1][1]:  # same word as the previous token
                assert (lab[i] == -100) == (lab[i - 1] == -100)
                together += lab[i] != -100
    assert together > 0


def test_ngram_spans(bert_tok, encoded):
    collator = DataCollatorForMLM(bert_tok, whole_word_mask=True, max_ngram=3, seed=2)
    sel = tok = 0
    runs = []
    for ex, batch in run_many(collator, encoded):
        for e, lab in zip(ex, batch["labels"]):
            masked_words = sorted({w for i, w in enumerate(e["word_ids"]) if w >= 0 and lab[i] != -100})
            n = 1
            for x, y in zip(masked_words, masked_words[1:]):
                if y == x + 1:
                    n += 1
                else:
                    runs.append(n)
                    n = 1
            if masked_words:
                runs.append(n)
            tok += sum(w >= 0 for w in e["word_ids"])
            sel += int((lab != -100).sum())
    assert abs(sel / tok - 0.15) < 0.025, "n-gram masking must keep the overall rate"
    assert sum(r >= 2 for r in runs) > 0.3 * len(runs), "spans of several words expected"


def test_seed_generator_and_passthrough(bert_tok, encoded):
    ex = [dict(e, sentence_order_label=i % 2, token_type_ids=[0] * len(e["input_ids"])) for i, e in enumerate(encoded[:6])]
    a = DataCollatorForMLM(bert_tok, seed=5)(ex)
    b = DataCollatorForMLM(bert_tok, generator=torch.Generator().manual_seed(5))(ex)
    c = DataCollatorForMLM(bert_tok, seed=6)(ex)
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    assert not torch.equal(a["labels"], c["labels"])
    assert a["sentence_order_label"].tolist() == [0, 1, 0, 1, 0, 1]
    assert a["token_type_ids"].shape == a["input_ids"].shape
    assert "word_ids" not in a and "special_tokens_mask" not in a
    padded = DataCollatorForMLM(bert_tok, pad_to_multiple_of=64, seed=5)(ex)
    assert padded["input_ids"].shape[1] % 64 == 0


def test_bare_lists_and_tensors(bert_tok, encoded):
    lists = [e["input_ids"] for e in encoded[:4]]
    a = DataCollatorForMLM(bert_tok, seed=0)(lists)
    b = DataCollatorForMLM(bert_tok, seed=0)([torch.tensor(x) for x in lists])
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert torch.equal(a["attention_mask"].sum(1), torch.tensor([len(x) for x in lists]))


def test_dataloader_over_datasets(bert_tok, texts):
    import datasets

    ds = datasets.Dataset.from_dict({"text": texts[:20]})
    ds = ds.map(lambda b: tokenize_for_mlm(bert_tok, b["text"], max_length=48), batched=True, remove_columns=["text"])
    loader = torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=DataCollatorForMLM(bert_tok, whole_word_mask=True,
                                                                                          seed=0))
    batches = list(loader)
    assert len(batches) == 3 and batches[0]["input_ids"].shape == batches[0]["labels"].shape


def test_bad_inputs(bert_tok, gpt_tok, encoded):
    with pytest.raises(ValueError, match="mask_token"):
        DataCollatorForMLM(gpt_tok)
    with pytest.raises(ValueError, match="mlm_probability"):
        DataCollatorForMLM(bert_tok, mlm_probability=0)
    with pytest.raises(ValueError, match="sum to at most 1"):
        DataCollatorForMLM(bert_tok, mask_replace_prob=0.9, random_replace_prob=0.2)
    with pytest.raises(ValueError, match="word_ids"):
        DataCollatorForMLM(bert_tok, whole_word_mask=True)([{"input_ids": encoded[0]["input_ids"]}])
    with pytest.raises(ValueError, match="empty batch"):
        DataCollatorForMLM(bert_tok)([])
    with pytest.raises(ValueError, match="input_ids"):
        DataCollatorForMLM(bert_tok)([{"text": "hello"}])


def test_threads_restored(bert_tok, encoded):
    before = torch.get_num_threads()
    DataCollatorForMLM(bert_tok, seed=0, num_threads=1)(encoded[:4])
    assert torch.get_num_threads() == before
