"""A per-token loss whose labels put targets on padding positions reads the reference's values there: the
backbone then keeps the padded layout (unpadding would leave zeros), so the loss equals the padded one."""

import pytest
import torch

from hf_xfmr.layers.padding import PADDED_LAYOUT, labels_read_padding, padded_layout
from hf_xfmr.models.albert import XfmrAlbertConfig, XfmrAlbertForMaskedLM
from hf_xfmr.models.bert import (
    XfmrBertConfig,
    XfmrBertForMaskedLM,
    XfmrBertForPreTraining,
    XfmrBertForTokenClassification,
)
from hf_xfmr.models.gpt import XfmrGPTConfig, XfmrGPTForCausalLM

BERT_NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # both runs compare exactly
CASES = {
    "bert-mlm": lambda: XfmrBertForMaskedLM(XfmrBertConfig.from_preset("tiny", **BERT_NO_DROPOUT)),
    "bert-pretraining": lambda: XfmrBertForPreTraining(XfmrBertConfig.from_preset("tiny", **BERT_NO_DROPOUT)),
    "bert-token-classification": lambda: XfmrBertForTokenClassification(
        XfmrBertConfig.from_preset("tiny", num_labels=3, classifier_dropout=0.0, **BERT_NO_DROPOUT)),
    "albert-mlm": lambda: XfmrAlbertForMaskedLM(XfmrAlbertConfig.from_preset("tiny")),
    "gpt-causal-lm": lambda: XfmrGPTForCausalLM(
        XfmrGPTConfig.from_preset("tiny", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
}


def _batch(vocab, num_labels=None):
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, min(vocab, 100), (3, 10), generator=g)
    mask = torch.ones_like(input_ids)
    mask[0, 6:] = 0
    mask[2, 3:] = 0
    labels = torch.randint(0, num_labels or min(vocab, 100), (3, 10), generator=g)
    return {"input_ids": input_ids, "attention_mask": mask}, labels


def test_labels_read_padding():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert labels_read_padding(torch.tensor([[4, -100, -100], [1, 2, 3]]), mask) is False
    assert labels_read_padding(torch.tensor([[4, -100, 7], [1, 2, 3]]), mask) is True
    assert labels_read_padding(None, mask) is False and labels_read_padding(torch.ones(2, 3), None) is False
    assert labels_read_padding(torch.ones(2, 4), mask) is False  # other shapes (e.g. decoder labels): not per-token
    assert PADDED_LAYOUT.get() is False
    with padded_layout():
        assert PADDED_LAYOUT.get() is True
        with padded_layout(False):
            assert PADDED_LAYOUT.get() is False
    assert PADDED_LAYOUT.get() is False


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("training", [False, True])
def test_targets_on_padding_give_the_padded_loss(name, training):
    torch.manual_seed(0)
    model = CASES[name]()
    model.train(training)
    if hasattr(model.config, "sparse_prediction"):
        model.config.sparse_prediction = False
    inputs, labels = _batch(model.config.vocab_size, getattr(model.config, "num_labels", None)
                            if "classification" in name else None)
    on_padding = labels  # targets everywhere, padding included (e.g. labels = input_ids by hand)
    only_real = labels.masked_fill(inputs["attention_mask"] == 0, -100)

    def loss(labels, unpad):
        model.config.unpad_inputs = unpad
        return model(**inputs, labels=labels).loss

    torch.testing.assert_close(loss(on_padding, True), loss(on_padding, False), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loss(only_real, True), loss(only_real, False), atol=1e-6, rtol=1e-6)
