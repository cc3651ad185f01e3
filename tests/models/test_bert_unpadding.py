"""BERT/RoBERTa with unpadding on (the default): the MLM step with sparse prediction on padded batches runs on
real tokens only and still equals transformers (loss and every gradient, fp32 atol 1e-5); the base model's
unpadded outputs equal the padded ones at every real position, with zeros at padding positions."""

import pytest
from torch.testing import assert_close

import hf_xfmr  # noqa: F401
from hf_xfmr.models.conversion import convert_state_dict

from .conftest import padded_batch
from .test_bert_parity import ATOL, RTOL, build_pair, grads_of, make_inputs


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_sparse_mlm_training_unpads_and_matches_the_reference(arch, attn):
    ref, ours = build_pair(arch, "masked-lm", attn)
    ref.train(), ours.train()
    ours.config.sparse_prediction = True
    inputs = make_inputs(arch, "masked-lm")
    keep = inputs["attention_mask"].bool()
    assert not keep.all()
    a, b = ref(**inputs), ours(**inputs, output_hidden_states=True)
    assert not b.hidden_states[-1][~keep].any(), "the padded batch must take the unpadded path (zeros at padding)"
    assert_close(b.loss, a.loss, atol=ATOL, rtol=RTOL)
    assert_close(b.logits, a.logits[inputs["labels"] != -100], atol=ATOL, rtol=RTOL)
    a.loss.backward(), b.loss.backward()
    ref_grads = convert_state_dict(grads_of(ref), arch, "masked-lm", to_hf=False)
    for name, grad in grads_of(ours).items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_unpadded_base_model_equals_padded_at_real_positions(arch):
    _, ours = build_pair(arch, "base", "sdpa")
    ours.eval()
    ids, mask, types = padded_batch(arch)
    kwargs = dict(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    if arch == "bert":
        kwargs["token_type_ids"] = types
    unpadded = ours(**kwargs)
    ours.config.unpad_inputs = False
    padded = ours(**kwargs)
    keep = mask.bool()
    for a, b in zip(unpadded.hidden_states, padded.hidden_states, strict=True):
        assert_close(a[keep], b[keep], atol=ATOL, rtol=0)
        assert not a[~keep].any()
        assert b[~keep].abs().sum() > 0  # the padded path computes the reference's values there
    assert_close(unpadded.pooler_output, padded.pooler_output, atol=ATOL, rtol=0)
    embeds = ours.get_input_embeddings()(ids)
    padded_embeds = ours(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
    ours.use_unpadding = True  # the former instance attribute sets the config field
    assert ours.config.unpad_inputs
    unpadded_embeds = ours(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
    assert_close(unpadded_embeds[keep], padded_embeds[keep], atol=ATOL, rtol=0)
    assert not unpadded_embeds[~keep].any()
