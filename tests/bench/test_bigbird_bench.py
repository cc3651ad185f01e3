"""The BigBird benchmark cases: the headline sizes (built cheaply, no timing) and, at the tiny size, both sides of
each case running one step through the block-sparse layout with equal outputs where the weights are equal."""

import pytest
import torch
from torch.testing import assert_close

from hf_xfmr.bench import make_case
from hf_xfmr.bench.bigbird import bigbird_mlm_train  # noqa: F401  (registers the cases)


def test_headline_case_sizes():
    mlm = make_case("bigbird-mlm-train")
    assert mlm.make_batch()["input_ids"].shape == (2, 4096) and "blocks of 64, 3 random blocks" in mlm.description
    seqcls = make_case("bigbird-seqcls-train-padded")
    batch = seqcls.make_batch()
    lengths = batch["attention_mask"].sum(-1)
    assert batch["input_ids"].shape == (4, 4096) and lengths.min() >= 1024
    assert "XfmrBertForMaskedLM (full attention, sdpa)" in make_case("bigbird-vs-bert-mlm-train").description


@pytest.mark.parametrize("name", ["bigbird-mlm-train", "bigbird-seqcls-train-padded"])
def test_tiny_cases_agree_with_the_reference(name):
    case = make_case(name, tiny=True)
    torch.manual_seed(0)
    ours, ref = case.build_pair()
    assert ours.config.attention_type == "block_sparse" and ours.config.block_size == 8
    batch = case.make_batch()
    ours.eval(), ref.eval()
    ours.config.unpad_inputs = False  # the batch as given, as the reference (unpadding cuts it to its longest row)
    out, expected = ours(**batch), ref(**batch)
    assert_close(out.loss, expected.loss, atol=1e-5, rtol=1e-5)


def test_tiny_bigbird_vs_bert_case_runs_both():
    case = make_case("bigbird-vs-bert-mlm-train", tiny=True)
    bigbird, bert = case.build_pair()
    assert type(bigbird).__name__ == "XfmrBigBirdForMaskedLM" and type(bert).__name__ == "XfmrBertForMaskedLM"
    batch = case.make_batch()
    for model in (bigbird, bert):
        assert torch.isfinite(model(**batch).loss)
