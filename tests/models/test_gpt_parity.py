"""GPT against transformers' GPT-2, through the production converter.

Every head, eager and sdpa, right-padded batches: hidden states, logits, loss and the gradient of every
parameter after one backward pass at fp32 atol 1e-5; round trips bit-exact in both directions. With
unpadding on (the default) outputs are compared at real positions (padding positions must hold zeros) and
question answering against the reference's span loss over real tokens; with `unpad_inputs=False` at every
position.
"""

import types

import pytest
import torch
import transformers
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.data import DataCollatorForCLM
from hf_xfmr.models.conversion import convert_state_dict

from ._gpt import EOS, PAD, VOCAB, padded_batch, tiny_gpt2_config
from ._parity import (
    assert_outputs_match,
    grads_of,
    masked_base_loss,
    outputs_of,
    real_positions,
    reference_qa_loss,
    with_task_labels,
)

ATOL, RTOL = 1e-5, 1e-5

HEADS = {
    "base": "GPT2Model",
    "causal-lm": "GPT2LMHeadModel",
    "sequence-classification": "GPT2ForSequenceClassification",
    "token-classification": "GPT2ForTokenClassification",
    "question-answering": "GPT2ForQuestionAnswering",
}


def make_inputs(task, seed=0):
    ids, mask = padded_batch(seed=seed)
    return with_task_labels(dict(input_ids=ids, attention_mask=mask), task, seed + 1)


def build_pair(task, attn, **overrides):
    # classifier_dropout: GPT-2's token head reads it when set (else 0.1); 0 keeps training mode deterministic.
    config = tiny_gpt2_config(num_labels=2 if task == "question-answering" else 3, classifier_dropout=0.0,
                              **overrides)
    torch.manual_seed(0)
    ref = getattr(transformers, HEADS[task])._from_config(config, attn_implementation=attn)
    ours = hf_xfmr.from_transformers(ref)
    assert type(ours).__name__ == {"base": "XfmrGPTModel", "causal-lm": "XfmrGPTForCausalLM"}.get(
        task, HEADS[task].replace("GPT2", "XfmrGPT"))
    assert ours.config._attn_implementation == attn
    return ref, ours


def assert_same_outputs(ref_out, our_out, skip=()):
    ref_named, our_named = outputs_of(ref_out), outputs_of(our_out)
    assert set(ref_named) - set(skip) == set(our_named) - set(skip)
    for key in set(ref_named) - set(skip):
        assert_close(our_named[key], ref_named[key], atol=ATOL, rtol=RTOL, msg=lambda m: f"{key}: {m}")


def assert_same_gradients(ref, ours, task):
    ref_grads = convert_state_dict(grads_of(ref), "gpt2", task, to_hf=False)
    our_grads = grads_of(ours)
    assert set(our_grads) == set(ref_grads) and len(our_grads) == len(list(ours.parameters()))
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("task", list(HEADS))
def test_parity_outputs_loss_and_gradients(task, attn, unpad):
    ref, ours = build_pair(task, attn)
    assert ours.config.unpad_inputs  # the default
    ours.config.unpad_inputs = unpad
    ref.train(), ours.train()  # dropout is 0, so training mode is deterministic and has gradients
    inputs = make_inputs(task)
    keep = real_positions(inputs)
    assert not keep.all()
    # Attention weights need the padded path: asked for (eager) only where unpadding is off.
    extra = dict(output_hidden_states=True, output_attentions=attn == "eager" and not unpad)
    ref_out, our_out = ref(**inputs, **extra), ours(**inputs, **extra)
    # Training with labels: ours computes the LM loss chunk by chunk and returns no logits.
    qa_masked = unpad and task == "question-answering"
    skip = ("logits",) if task == "causal-lm" else ("loss",) if qa_masked else ()
    assert_outputs_match(our_out, ref_out, keep, unpadded=unpad, atol=ATOL, rtol=RTOL, skip=skip)
    if task == "causal-lm":
        assert our_out.logits is None
    if task == "base":
        loss_ref, loss_ours = (masked_base_loss(out, keep) for out in (ref_out, our_out))
    elif qa_masked:  # padding positions masked: the reference's span loss over real tokens
        loss_ref, loss_ours = reference_qa_loss(ref_out, inputs), our_out.loss
        assert_close(loss_ours, loss_ref, atol=ATOL, rtol=RTOL)
    else:
        loss_ref, loss_ours = ref_out.loss, our_out.loss
    assert torch.isfinite(loss_ref)
    loss_ref.backward()
    loss_ours.backward()
    assert_same_gradients(ref, ours, task)


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_causal_lm_dense_loss_and_eval_logits_match(attn, unpad):
    """`chunked_lm_loss=False` returns full logits in training; eval mode always does (and builds a cache)."""
    ref, ours = build_pair("causal-lm", attn)
    ours.config.chunked_lm_loss = False
    ours.config.unpad_inputs = unpad
    ref.train(), ours.train()
    inputs = make_inputs("causal-lm")
    keep = real_positions(inputs)
    ref_out, our_out = ref(**inputs), ours(**inputs)
    assert_outputs_match(our_out, ref_out, keep, unpadded=unpad, atol=ATOL, rtol=RTOL)
    if unpad:  # the LM logits at padding positions are those of a zero vector: zeros (no bias)
        assert not our_out.logits[~keep].any()
    ref_out.loss.backward(), our_out.loss.backward()
    assert_same_gradients(ref, ours, "causal-lm")
    ref.eval(), ours.eval()
    with torch.no_grad():
        assert_outputs_match(ours(**inputs), ref(**inputs), keep, unpadded=unpad, atol=ATOL, rtol=RTOL)


def test_num_items_in_batch_matches_reference():
    ref, ours = build_pair("causal-lm", "sdpa")
    inputs = make_inputs("causal-lm")
    for mode in ("train", "eval"):
        ref.train(mode == "train"), ours.train(mode == "train")
        assert_close(ours(**inputs, num_items_in_batch=40).loss, ref(**inputs, num_items_in_batch=40).loss,
                     atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
def test_token_type_ids_are_looked_up_in_the_word_embeddings_as_in_gpt2(unpad):
    ref, ours = build_pair("base", "sdpa")
    ours.config.unpad_inputs = unpad
    ids, mask = padded_batch()
    types_ = torch.randint(0, 5, ids.shape)
    assert_outputs_match(ours(input_ids=ids, attention_mask=mask, token_type_ids=types_),
                         ref(input_ids=ids, attention_mask=mask, token_type_ids=types_), mask.bool(),
                         unpadded=unpad, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("overrides", [
    dict(scale_attn_weights=False),
    dict(scale_attn_by_inverse_layer_idx=True, reorder_and_upcast_attn=True),
    dict(activation_function="relu", n_inner=None),
    dict(tie_word_embeddings=False, layer_norm_epsilon=1e-3),
], ids=["unscaled", "inverse-layer-scaling+upcast", "relu-default-inner", "untied"])
def test_config_variants_match(overrides):
    ref, ours = build_pair("causal-lm", "eager", **overrides)
    ours.config.chunked_lm_loss = False
    ref.train(), ours.train()
    inputs = make_inputs("causal-lm")
    ref_out, our_out = ref(**inputs), ours(**inputs)  # unpadded (the default): real positions
    assert_outputs_match(our_out, ref_out, real_positions(inputs), unpadded=True, atol=ATOL, rtol=RTOL)
    ref_out.loss.backward(), our_out.loss.backward()
    assert_same_gradients(ref, ours, "causal-lm")
    assert (ours.lm_head.weight is ours.model.embeddings.word_embeddings.weight) == ref.config.tie_word_embeddings


@pytest.mark.parametrize("attn,mask_dtype", [("sdpa", None), ("eager", torch.float32)])
def test_packed_rows_with_a_4d_mask_match_reference(attn, mask_dtype):
    """DataCollatorForCLM(isolate_documents=True): block-diagonal mask + restarting positions."""
    ref, ours = build_pair("causal-lm", attn)
    tok = types.SimpleNamespace(pad_token_id=PAD, eos_token_id=EOS)
    rows = [{"input_ids": [5, 6, 7, EOS, 9, 10, EOS, 11, 12], "position_ids": [0, 1, 2, 3, 0, 1, 2, 0, 1]},
            {"input_ids": [20, 21, EOS, 22, 23, 24], "position_ids": [0, 1, 2, 0, 1, 2]}]
    batch = DataCollatorForCLM(tok, isolate_documents=True, mask_dtype=mask_dtype)(rows)
    ref.train(), ours.train()
    ours.config.chunked_lm_loss = False
    ref_out, our_out = ref(**batch, output_hidden_states=True), ours(**batch, output_hidden_states=True)
    assert_same_outputs(ref_out, our_out)
    ref_out.loss.backward(), our_out.loss.backward()
    assert_same_gradients(ref, ours, "causal-lm")


@pytest.mark.parametrize("task", list(HEADS))
def test_round_trips_are_exact(task):
    ref, ours = build_pair(task, "sdpa")
    back = hf_xfmr.to_transformers(ours)
    assert type(back) is type(ref)
    ref_state, back_state = ref.state_dict(), back.state_dict()
    assert list(back_state) == list(ref_state)
    for name, tensor in ref_state.items():
        assert torch.equal(back_state[name], tensor), name
    again = hf_xfmr.from_transformers(back)
    assert again.config.to_diff_dict() == ours.config.to_diff_dict()
    for (name, a), (_, b) in zip(ours.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_sequence_classification_reads_the_last_real_token_with_left_padding_too():
    ref, ours = build_pair("sequence-classification", "sdpa")
    ids, mask = padded_batch(left=True)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # the reference needs them for left padding
    expected = ref(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    assert_close(ours(input_ids=ids, attention_mask=mask).logits, expected, atol=ATOL, rtol=RTOL)


def test_convert_from_directory_and_reject_cross_attention(tmp_path):
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(tiny_gpt2_config()).eval()
    ref.save_pretrained(tmp_path)
    ours = hf_xfmr.from_transformers(tmp_path)
    assert type(ours).__name__ == "XfmrGPTForCausalLM"
    ids, mask = padded_batch()
    keep = mask.bool()  # unpadded (the default): outputs at real positions equal the reference's
    assert_close(ours(input_ids=ids, attention_mask=mask).logits[keep],
                 ref(input_ids=ids, attention_mask=mask).logits[keep], atol=ATOL, rtol=RTOL)
    classifier = hf_xfmr.from_transformers(str(tmp_path), task="sequence-classification")
    assert type(classifier).__name__ == "XfmrGPTForSequenceClassification"
    assert torch.equal(classifier.model.embeddings.word_embeddings.weight, ref.transformer.wte.weight)
    with pytest.raises(ValueError, match="cross-attention"):
        hf_xfmr.from_transformers(transformers.GPT2Model(tiny_gpt2_config(add_cross_attention=True)))
    assert VOCAB == ours.config.vocab_size
