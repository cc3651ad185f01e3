"""BART parity with transformers through the production converter: BartModel, BartForConditionalGeneration
(with a non-zero final_logits_bias), BartForSequenceClassification, BartForQuestionAnswering and
BartForCausalLM, sdpa and eager, padded encoder and decoder batches; outputs, losses and one-step gradients
to 1e-5 (fp32); the round trip back to transformers. Each runs with the encoder unpadded (the default:
encoder outputs at real positions, zeros at padding, decoder outputs everywhere) and with
`unpad_inputs=False` (every position)."""

import functools

import pytest
import torch
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.models.conversion import convert_state_dict
from hf_xfmr.models.seq2seq import shift_tokens_right

from ._bart import EOS, PAD, pair, padded_batch, padded_labels
from ._parity import assert_outputs_match, is_encoder_output, pair_with_unpadding
from ._seq2seq import assert_same_seq2seq_head_output

TOL = dict(atol=1e-5, rtol=1e-5)
UNPAD = pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])


unpadded_pair = functools.partial(pair_with_unpadding, pair)  # unpadded_pair(unpad, *pair_args)


def _grads(model):
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(ref, ours, task):
    ref_grads = _grads(ref)
    converted = convert_state_dict(_grads(ours), "xfmr-bart", task, to_hf=True)
    assert ref_grads, "no gradients"
    for name, grad in ref_grads.items():
        assert name in converted, name
        assert_close(converted[name], grad, **TOL, msg=lambda m: f"{name}: {m}")


@UNPAD
@pytest.mark.parametrize("scale_embedding", [False, True])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_conditional_generation_outputs_loss_and_grads(attn, scale_embedding, unpad):
    ref, ours = unpadded_pair(unpad, "BartForConditionalGeneration", attn, scale_embedding=scale_embedding)
    ids, mask = padded_batch()
    labels, decoder_mask = padded_labels()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, decoder_attention_mask=decoder_mask)
    expected = ref(**inputs, output_hidden_states=True)
    got = ours(**inputs, output_hidden_states=True)
    assert_outputs_match(got, expected, mask.bool(), unpadded=unpad, unpadded_keys=is_encoder_output, **TOL)

    # Training step: our loss comes from the chunked cross-entropy (no logits), gradients must agree.
    ref.train(), ours.train()
    ref(**inputs).loss.backward()
    out = ours(**inputs)
    assert out.logits is None
    out.loss.backward()
    assert_close(out.loss, expected.loss, **TOL)
    assert_same_grads(ref, ours, "seq2seq-lm")


@UNPAD
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_base_model(attn, unpad):
    ref, ours = unpadded_pair(unpad, "BartModel", attn)
    ids, mask = padded_batch()
    labels, decoder_mask = padded_labels()
    decoder_ids = shift_tokens_right(labels, PAD, EOS)
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids,
                  decoder_attention_mask=decoder_mask)
    expected = ref(**inputs, output_hidden_states=True)
    got = ours(**inputs, output_hidden_states=True)
    assert_outputs_match(got, expected, mask.bool(), unpadded=unpad, unpadded_keys=is_encoder_output, **TOL)
    # without decoder inputs both read input_ids shifted right
    assert_close(ours(input_ids=ids, attention_mask=mask).last_hidden_state,
                 ref(input_ids=ids, attention_mask=mask).last_hidden_state, **TOL)
    ref.train(), ours.train()
    weights = torch.randn_like(expected.last_hidden_state)
    (ref(**inputs).last_hidden_state * weights).mean().backward()
    (ours(**inputs).last_hidden_state * weights).mean().backward()
    assert_same_grads(ref, ours, "base")


@UNPAD
@pytest.mark.parametrize("hf_class,task,labels", [
    ("BartForSequenceClassification", "sequence-classification", "class"),
    ("BartForQuestionAnswering", "question-answering", "span"),
])
def test_heads(hf_class, task, labels, unpad):
    ref, ours = unpadded_pair(unpad, hf_class, num_labels=3 if labels != "span" else 2, classifier_dropout=0.0)
    ids, mask = padded_batch()
    inputs = dict(input_ids=ids, attention_mask=mask)
    if labels == "class":
        inputs["labels"] = torch.tensor([0, 2, 1])
    else:
        inputs.update(start_positions=torch.tensor([1, 3, 0]), end_positions=torch.tensor([4, 5, 2]))
    expected = ref(**inputs, output_hidden_states=True)
    got = ours(**inputs, output_hidden_states=True)
    # Both heads read the decoder: equal at every position (QA: the reference's logits and loss, padding not masked).
    assert_outputs_match(got, expected, mask.bool(), unpadded=unpad, unpadded_keys=is_encoder_output, **TOL)
    ref.train(), ours.train()
    ref(**inputs).loss.backward()
    ours(**inputs).loss.backward()
    assert_same_grads(ref, ours, task)


@pytest.mark.parametrize("hf_class", ["BartForSequenceClassification", "BartForQuestionAnswering"])
def test_seq2seq_heads_return_the_reference_output_class_and_fields(hf_class):
    # Hardening 2, point 7: Seq2SeqSequenceClassifierOutput / Seq2SeqQuestionAnsweringModelOutput with the
    # encoder's and decoder's states, the cross-attentions and the cache, as the reference fills them.
    ref, ours = pair(hf_class, attn="eager", num_labels=3 if "Sequence" in hf_class else 2, classifier_dropout=0.0)
    ids, mask = padded_batch()
    assert_same_seq2seq_head_output(ref, ours, dict(input_ids=ids, attention_mask=mask), TOL)
    # With targets the reference builds no cache: neither does ours, and the tuples still agree.
    targets = ({"labels": torch.tensor([0, 2, 1])} if "Sequence" in hf_class else
               {"start_positions": torch.tensor([1, 3, 0]), "end_positions": torch.tensor([4, 5, 2])})
    assert_same_seq2seq_head_output(ref, ours, dict(input_ids=ids, attention_mask=mask, **targets), TOL)
    assert ours(input_ids=ids, attention_mask=mask, **targets).past_key_values is None


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_causal_lm(attn):
    # transformers sizes BartForCausalLM's cache by `encoder_layers`: equal layer counts keep its cache working
    ref, ours = pair("BartForCausalLM", attn, decoder_layers=2)
    ids, mask = padded_batch()
    labels = ids.masked_fill(mask == 0, -100)  # not shifted inside either model
    expected = ref(input_ids=ids, attention_mask=mask, labels=labels)
    got = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert_close(got.logits, expected.logits, **TOL)
    assert_close(got.loss, expected.loss, **TOL)
    ref.train(), ours.train()
    ref(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    out = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert out.logits is None
    out.loss.backward()
    assert_close(out.loss, expected.loss, **TOL)
    assert_same_grads(ref, ours, "causal-lm")


def test_causal_lm_greedy_generation_matches_the_reference():
    ref, ours = pair("BartForCausalLM", decoder_layers=2)
    ids = padded_batch()[0][:, :4]  # unpadded prompts
    kwargs = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False)
    assert torch.equal(ours.generate(ids, **kwargs), ref.generate(ids, **kwargs))


@pytest.mark.parametrize("hf_class", ["BartModel", "BartForConditionalGeneration", "BartForSequenceClassification",
                                      "BartForQuestionAnswering", "BartForCausalLM"])
def test_round_trip_back_to_transformers(hf_class):
    ref, ours = pair(hf_class)
    back = hf_xfmr.to_transformers(ours)
    assert type(back).__name__ == hf_class
    expected, got = ref.state_dict(), back.state_dict()
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


def test_task_base_from_a_model_with_a_head_takes_its_backbone():
    ref, _ = pair("BartForConditionalGeneration")
    ids, mask = padded_batch()
    base = hf_xfmr.from_transformers(ref, task="base").eval()
    decoder_ids = torch.full((3, 4), 5)
    expected = ref(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids,
                   output_hidden_states=True).decoder_hidden_states[-1]
    got = base(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids).last_hidden_state
    assert_close(got, expected, **TOL)
