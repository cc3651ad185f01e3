"""SOP (ALBERT) and NSP (BERT) pair construction."""

import pytest

from hf_xfmr.data import DataCollatorForMLM, create_nsp_examples, create_sop_examples, tokenize_documents


@pytest.fixture(scope="module")
def docs(albert_tok, corpus):
    return tokenize_documents(albert_tok, corpus)


def as_text(tokens):
    return "," + ",".join(map(str, tokens)) + ","


def contiguous_in(seq, doc_text):
    """Is `seq` a contiguous slice of the document (given as `as_text`)?"""
    return as_text(seq) in doc_text


def split_pair(tok, ex):
    ids = ex["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    sep = ids.index(tok.sep_token_id)
    a, b = ids[1:sep], ids[sep + 1:-1]
    assert ex["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    assert ex["special_tokens_mask"] == [1] + [0] * len(a) + [1] + [0] * len(b) + [1]
    return a, b


def test_sop_swap_and_balance(albert_tok, docs):
    # Long max length and no short sequences: no truncation, so A and B stay exact doc slices.
    examples = create_sop_examples(docs, albert_tok, max_seq_length=100_000, short_seq_prob=0.0, seed=0)
    examples += create_sop_examples(docs, albert_tok, max_seq_length=64, seed=1)
    labels = [e["sentence_order_label"] for e in examples]
    assert abs(sum(labels) / len(labels) - 0.5) < 0.1
    flat_docs = [as_text([t for s in d for t in s]) for d in docs]
    for e in examples[:150]:
        a, b = split_pair(albert_tok, e)
        assert len(a) + len(b) + 3 <= (100_000 if len(e["input_ids"]) > 64 else 64)
    for e in create_sop_examples(docs, albert_tok, max_seq_length=100_000, short_seq_prob=0.0, seed=0)[:120]:
        a, b = split_pair(albert_tok, e)
        first, second = (b, a) if e["sentence_order_label"] == 1 else (a, b)
        assert any(contiguous_in(first + second, d) for d in flat_docs), "swap label must match the order"


def test_nsp_random_next(albert_tok, docs):
    examples = create_nsp_examples(docs, albert_tok, max_seq_length=100_000, short_seq_prob=0.0, seed=0)
    labels = [e["next_sentence_label"] for e in examples]
    assert 0.4 < sum(labels) / len(labels) < 0.75  # 0.5, plus single-segment chunks that must go random
    flat_docs = [as_text([t for s in d for t in s]) for d in docs]
    for e in examples[:80]:
        a, b = split_pair(albert_tok, e)
        home = [i for i, d in enumerate(flat_docs) if contiguous_in(a, d)]
        if e["next_sentence_label"] == 0:
            assert any(contiguous_in(a + b, flat_docs[i]) for i in home)
        else:
            assert any(contiguous_in(b, d) for i, d in enumerate(flat_docs) if i not in home)


def test_truncation_and_mlm_passthrough(albert_tok, docs):
    examples = create_sop_examples(docs, albert_tok, max_seq_length=32, seed=3)
    assert all(len(e["input_ids"]) <= 32 for e in examples)
    assert create_sop_examples(docs, albert_tok, max_seq_length=32, seed=3) == examples  # seeded
    batch = DataCollatorForMLM(albert_tok, seed=0)(examples[:8])
    assert batch["sentence_order_label"].tolist() == [e["sentence_order_label"] for e in examples[:8]]
    assert batch["token_type_ids"].shape == batch["input_ids"].shape


def test_bad_inputs(albert_tok, gpt_tok, docs):
    with pytest.raises(ValueError, match="empty"):
        create_sop_examples([], albert_tok)
    with pytest.raises(ValueError, match="at least 2 documents"):
        create_nsp_examples(docs[:1], albert_tok)
    with pytest.raises(ValueError, match="cls_token"):
        create_sop_examples(docs, gpt_tok)
    with pytest.raises(ValueError, match="too short"):
        create_sop_examples(docs, albert_tok, max_seq_length=4)
    with pytest.raises(ValueError, match="too short"):
        create_sop_examples([[[7]]], albert_tok)
