"""T5 parity with transformers through the production converter: T5Model, T5ForConditionalGeneration,
T5EncoderModel and the heads, v1.0 (ReLU, tied and scaled head) and v1.1 (gated GELU, untied head), sdpa
and eager, padded encoder and decoder batches; outputs, losses and one-step gradients to 1e-5 (fp32).
Each runs with the encoder unpadded (the default: encoder outputs at real positions, zeros at padding,
decoder outputs everywhere) and with `unpad_inputs=False` (every position)."""

import functools

import pytest
import torch
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.models.conversion import convert_state_dict
from hf_xfmr.models.seq2seq import shift_tokens_right

from ._parity import assert_outputs_match, is_encoder_output, pair_with_unpadding
from ._seq2seq import assert_same_seq2seq_head_output
from ._t5 import PAD, VARIANTS, pair, padded_batch, padded_labels

TOL = dict(atol=1e-5, rtol=1e-5)
UNPAD = pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])


unpadded_pair = functools.partial(pair_with_unpadding, pair)  # unpadded_pair(unpad, *pair_args)


def _grads(model):
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(ref, ours, task):
    ref_grads = _grads(ref)
    converted = convert_state_dict(_grads(ours), "xfmr-t5", task, to_hf=True)
    assert ref_grads, "no gradients"
    for name, grad in ref_grads.items():
        assert name in converted, name
        assert_close(converted[name], grad, **TOL, msg=lambda m: f"{name}: {m}")


@UNPAD
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_conditional_generation_outputs_loss_and_grads(variant, attn, unpad):
    ref, ours = unpadded_pair(unpad, "T5ForConditionalGeneration", variant, attn)
    ids, mask = padded_batch()
    labels, decoder_mask = padded_labels()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, decoder_attention_mask=decoder_mask)
    expected = ref(**inputs, use_cache=False, output_hidden_states=True)
    got = ours(**inputs, output_hidden_states=True)
    assert_outputs_match(got, expected, mask.bool(), unpadded=unpad, unpadded_keys=is_encoder_output, **TOL)

    # Training step: our loss comes from the chunked cross-entropy (no logits), gradients must agree.
    ref.train(), ours.train()
    ref(**inputs, use_cache=False).loss.backward()
    out = ours(**inputs)
    assert out.logits is None
    out.loss.backward()
    assert_close(out.loss, expected.loss, **TOL)
    assert_same_grads(ref, ours, "seq2seq-lm")


@UNPAD
@pytest.mark.parametrize("variant", VARIANTS)
def test_base_model_and_encoder_model(variant, unpad):
    ref, ours = unpadded_pair(unpad, "T5Model", variant)
    ids, mask = padded_batch()
    keep = mask.bool()
    labels, decoder_mask = padded_labels()
    decoder_ids = shift_tokens_right(labels, PAD, PAD)
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids,
                  decoder_attention_mask=decoder_mask, output_hidden_states=True)
    expected = ref(**inputs, use_cache=False)
    got = ours(**inputs)
    assert_outputs_match(got, expected, keep, unpadded=unpad, unpadded_keys=is_encoder_output, **TOL)
    ref.train(), ours.train()
    weights = torch.randn_like(expected.last_hidden_state)
    (ref(**inputs, use_cache=False).last_hidden_state * weights).mean().backward()
    (ours(**inputs).last_hidden_state * weights).mean().backward()
    assert_same_grads(ref, ours, "base")

    ref, ours = unpadded_pair(unpad, "T5EncoderModel", variant)
    assert type(ours).__name__ == "XfmrT5EncoderModel"
    expected = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert_outputs_match(ours(input_ids=ids, attention_mask=mask, output_hidden_states=True), expected, keep,
                         unpadded=unpad, **TOL)
    ref.train(), ours.train()
    weights = torch.randn_like(expected.last_hidden_state) * keep[..., None]  # real positions: what unpadding keeps
    (ref(input_ids=ids, attention_mask=mask).last_hidden_state * weights).mean().backward()
    (ours(input_ids=ids, attention_mask=mask).last_hidden_state * weights).mean().backward()
    assert_same_grads(ref, ours, "encoder")


@UNPAD
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("hf_class,task,labels", [
    ("T5ForSequenceClassification", "sequence-classification", "class"),
    ("T5ForTokenClassification", "token-classification", "tokens"),
    ("T5ForQuestionAnswering", "question-answering", "span"),
])
def test_heads(variant, hf_class, task, labels, unpad):
    ref, ours = unpadded_pair(unpad, hf_class, variant, num_labels=3 if labels != "span" else 2,
                              classifier_dropout=0.0)
    ids, mask = padded_batch()
    inputs = dict(input_ids=ids, attention_mask=mask)
    if labels == "class":
        inputs["labels"] = torch.tensor([0, 2, 1])
    elif labels == "tokens":
        inputs["labels"] = torch.randint(0, 3, ids.shape).masked_fill(mask == 0, -100)
    else:
        inputs.update(start_positions=torch.tensor([1, 3, 0]), end_positions=torch.tensor([4, 5, 2]))
    hf_kwargs = {} if labels == "tokens" else {"use_cache": False}
    expected = ref(**inputs, **hf_kwargs, output_hidden_states=True)
    got = ours(**inputs, output_hidden_states=True)
    # The token classifier reads the (unpadded) encoder; the others the decoder, equal at every position
    # (QA: the reference's logits and loss, padding not masked).
    unpadded_keys = None if labels == "tokens" else is_encoder_output
    assert_outputs_match(got, expected, mask.bool(), unpadded=unpad, unpadded_keys=unpadded_keys, **TOL)
    ref.train(), ours.train()
    ref(**inputs, **hf_kwargs).loss.backward()
    ours(**inputs).loss.backward()
    assert_same_grads(ref, ours, task)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("hf_class", ["T5ForSequenceClassification", "T5ForQuestionAnswering"])
def test_seq2seq_heads_return_the_reference_output_class_and_fields(variant, hf_class):
    # Hardening 2, point 7: Seq2SeqSequenceClassifierOutput / Seq2SeqQuestionAnsweringModelOutput with the
    # encoder's and decoder's states, the cross-attentions and the cache, as the reference fills them.
    ref, ours = pair(hf_class, variant, attn="eager", num_labels=3 if "Sequence" in hf_class else 2,
                     classifier_dropout=0.0)
    ids, mask = padded_batch()
    assert_same_seq2seq_head_output(ref, ours, dict(input_ids=ids, attention_mask=mask), TOL)
    # With targets the reference builds no cache: neither does ours, and the tuples still agree.
    targets = ({"labels": torch.tensor([0, 2, 1])} if "Sequence" in hf_class else
               {"start_positions": torch.tensor([1, 3, 0]), "end_positions": torch.tensor([4, 5, 2])})
    assert_same_seq2seq_head_output(ref, ours, dict(input_ids=ids, attention_mask=mask, **targets), TOL)
    assert ours(input_ids=ids, attention_mask=mask, **targets).past_key_values is None


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("hf_class", ["T5Model", "T5ForConditionalGeneration", "T5EncoderModel",
                                      "T5ForSequenceClassification", "T5ForTokenClassification",
                                      "T5ForQuestionAnswering"])
def test_round_trip_back_to_transformers(variant, hf_class):
    ref, ours = pair(hf_class, variant)
    back = hf_xfmr.to_transformers(ours)
    assert type(back).__name__ == hf_class
    expected, got = ref.state_dict(), back.state_dict()
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key
    if hasattr(back, "lm_head"):
        tied = back.lm_head.weight is back.shared.weight
        assert tied == (variant == "v1.0")
        assert back.config.scale_decoder_outputs == (variant == "v1.0")


def test_task_base_from_a_model_with_a_head_takes_its_backbone():
    ref, _ = pair("T5ForConditionalGeneration")
    ids, mask = padded_batch()
    base = hf_xfmr.from_transformers(ref, task="base").eval()
    decoder_ids = torch.zeros(3, 4, dtype=torch.long)
    expected = ref(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids, use_cache=False,
                   output_hidden_states=True).decoder_hidden_states[-1]
    got = base(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).last_hidden_state
    assert_close(got, expected, **TOL)
