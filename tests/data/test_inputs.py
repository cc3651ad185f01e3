"""What every collator does with awkward batches: empty examples, examples whose keys differ, dicts mixed
with id lists, and batches with (almost) nothing to predict."""

import numpy as np
import pytest
import torch

from hf_xfmr.data import (
    DataCollatorForCLM,
    DataCollatorForMLM,
    DataCollatorForPLM,
    DataCollatorForSpanCorruption,
    tokenize_for_mlm,
)
from hf_xfmr.data.collation import pad_ragged


@pytest.fixture(scope="module")
def collators(bert_tok, xlnet_tok, gpt_tok, t5_tok):
    return {
        "mlm": (DataCollatorForMLM(bert_tok, seed=0), bert_tok),
        "plm": (DataCollatorForPLM(xlnet_tok, num_predict=2, seed=0), xlnet_tok),
        "clm": (DataCollatorForCLM(gpt_tok, seed=0), gpt_tok),
        "span": (DataCollatorForSpanCorruption(t5_tok, seed=0), t5_tok),
    }


KINDS = ["mlm", "plm", "clm", "span"]


def _ids(tok, text="the quick brown fox jumps over the lazy dog"):
    return tok(text)["input_ids"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "batch, message",
    [
        (lambda ids: [[]], r"Example\(s\) \[0\] have no tokens"),
        (lambda ids: [{"input_ids": []}], r"Example\(s\) \[0\] have no tokens"),
        (lambda ids: [ids, [], ids[:3], []], r"Example\(s\) \[1, 3\] have no tokens"),
        (lambda ids: torch.zeros(2, 0, dtype=torch.long), r"Example\(s\) \[0, 1\] have no tokens"),
        (lambda ids: np.zeros((3, 0), dtype=np.int64), r"Example\(s\) \[0, 1, 2\] have no tokens"),
        (lambda ids: torch.zeros(0, 5, dtype=torch.long), "empty batch"),
        (lambda ids: [], "empty batch"),
        (lambda ids: ids, r"example 0 is not a sequence of token ids \(got int"),
        (lambda ids: ["some text", "more text"], r"example 0 is not a sequence of token ids \(got str"),
        (lambda ids: torch.tensor(ids), "got a 0-dimensional Tensor"),
    ],
)
def test_empty_or_malformed_examples(kind, batch, message, collators):
    collator, tok = collators[kind]
    with pytest.raises(ValueError, match=message):
        collator(batch(_ids(tok)))


@pytest.mark.parametrize("kind", KINDS)
def test_examples_with_different_keys(kind, collators):
    collator, tok = collators[kind]
    enc = tok(["the quick brown fox", "jumps over the lazy dog"])
    full = [{k: enc[k][i] for k in enc} for i in range(2)]
    if "token_type_ids" not in full[0]:
        full = [dict(ex, token_type_ids=[0] * len(ex["input_ids"])) for ex in full]
    bare = {"input_ids": full[1]["input_ids"]}
    for batch in ([full[0], bare], [bare, full[0]]):  # the same error in either order
        with pytest.raises(ValueError, match=r"Example 1 has keys .* example 0 has .*: missing|Example 1 has keys .* "
                                             r"example 0 has .*: extra") as err:
            collator(batch)
        assert "token_type_ids" in str(err.value)
    for batch in ([full[0], full[1]["input_ids"]], [full[1]["input_ids"], full[0]]):
        with pytest.raises(ValueError, match="mixes dicts and bare id sequences"):
            collator(batch)


def test_mlm_always_predicts_something_when_it_can(bert_tok):
    # At 15%, a row of a few tokens gets no target by Bernoulli draw in most batches; the collator adds one.
    tiny = [{"input_ids": _ids(bert_tok, "hello world")}]
    two = [{"input_ids": _ids(bert_tok, "dog")}, {"input_ids": _ids(bert_tok, "cat")}]
    for seed in range(60):
        for batch in (tiny, two):
            for options in ({}, {"max_ngram": 3}):
                out = DataCollatorForMLM(bert_tok, seed=seed, **options)(batch)
                targets = out["labels"] != -100
                assert targets.sum() >= 1
                originals, _ = pad_ragged([ex["input_ids"] for ex in batch], bert_tok.pad_token_id)
                assert torch.equal(out["labels"][targets], originals[targets])
                assert not torch.isin(originals[targets], torch.tensor(bert_tok.all_special_ids)).any()


def test_mlm_forced_target_is_a_whole_word(bert_tok):
    enc = tokenize_for_mlm(bert_tok, ["unbelievably", "ok"])
    examples = [{k: enc[k][i] for k in enc} for i in range(2)]
    word_tokens = [sum(1 for w in e["word_ids"] if w == 0) for e in examples]
    for seed in range(40):
        out = DataCollatorForMLM(bert_tok, whole_word_mask=True, mlm_probability=0.01, seed=seed)(examples)
        per_row = (out["labels"] != -100).sum(1).tolist()
        assert sum(per_row) >= 1
        assert all(n in (0, w) for n, w in zip(per_row, word_tokens)), "whole words only"


def test_mlm_batch_with_nothing_to_mask(bert_tok):
    # Only special tokens: allowed, and every label is -100 (the models then give loss 0).
    only_special = [[bert_tok.cls_token_id, bert_tok.sep_token_id]] * 2
    out = DataCollatorForMLM(bert_tok, seed=0)(only_special)
    assert (out["labels"] == -100).all()
    assert torch.equal(out["input_ids"], torch.tensor(only_special))


def test_plm_row_with_nothing_to_predict_is_an_error(xlnet_tok):
    with pytest.raises(ValueError, match="no token that can be predicted"):
        DataCollatorForPLM(xlnet_tok, num_predict=1)([[xlnet_tok.sep_token_id, xlnet_tok.cls_token_id]])
