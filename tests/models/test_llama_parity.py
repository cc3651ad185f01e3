"""The Llama family (Llama, Mistral, Qwen2) against transformers, through the production converter.

Every head of every tiny variant (GQA and MHA, tied and untied embeddings, each RoPE scaling, Llama's biases,
Mistral's sliding window shorter than the batch, Qwen2's q/k/v biases), right- and left-padded batches, unpadded
(the default) and with `unpad_inputs=False`, sdpa and eager: hidden states, logits, loss and the gradient of every
parameter after one backward pass, fp32 atol/rtol 1e-5. Unpadded outputs are compared at real positions (padding
positions must hold zeros) and question answering against the reference's span loss over real tokens. A
left-padded row has no token before its first to predict it (its label is -100 here); a padding query that sees no
key holds zeros in ours and, in the reference's eager kernel, a uniform average of masked values: eager compares
real positions.
"""

import pytest
import torch
from torch.testing import assert_close

from hf_xfmr.models.conversion import convert_state_dict

from ._llama import HEAD_SUFFIXES, VARIANTS, hf_model_type, padded_batch, pair
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


def make_inputs(task, left, seed=0):
    ids, mask = padded_batch(seed=seed, left=left)
    inputs = with_task_labels(dict(input_ids=ids, attention_mask=mask), task, seed + 1)
    if task == "causal-lm" and left:  # nothing before a left-padded row's first token predicts it
        first = mask.argmax(dim=-1)
        inputs["labels"][torch.arange(len(first)), first] = -100
    if task == "question-answering" and left:  # answer spans on real tokens: shifted past the left padding
        pads = (mask == 0).sum(dim=-1)
        inputs["start_positions"], inputs["end_positions"] = (inputs[k] + pads for k in ("start_positions",
                                                                                          "end_positions"))
    return inputs


def build_pair(variant, task, attn):
    num_labels = 2 if task == "question-answering" else 3
    ref, ours = pair(variant, task, attn, num_labels=num_labels, classifier_dropout=0.0)
    assert type(ours).__name__ == "XfmrLlama" + HEAD_SUFFIXES[task]
    assert ours.config._attn_implementation == attn and ours.config.hf_model_type == hf_model_type(variant)
    return ref.train(), ours.train()  # no dropout: training mode is deterministic and has gradients


def assert_real_positions_match(ours, ref, keep, skip):
    ref_named, our_named = outputs_of(ref), outputs_of(ours)
    assert set(ref_named) - set(skip) == set(our_named) - set(skip)
    for key in sorted(set(ref_named) - set(skip)):
        a, b = our_named[key], ref_named[key]
        if a.dim() >= 2 and tuple(a.shape[:2]) == tuple(keep.shape):
            a, b = a[keep], b[keep]
        assert_close(a, b, atol=ATOL, rtol=RTOL, msg=lambda m: f"{key}: {m}")


def assert_same_gradients(ref, ours, variant, task):
    ref_grads = convert_state_dict(grads_of(ref), hf_model_type(variant), task, to_hf=False)
    our_grads = grads_of(ours)
    assert set(our_grads) == set(ref_grads) and len(our_grads) == len(list(ours.parameters()))
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


def check_parity(variant, task, attn, unpad, left):
    ref, ours = build_pair(variant, task, attn)
    assert ours.config.unpad_inputs  # the default
    ours.config.unpad_inputs = unpad
    inputs = make_inputs(task, left)
    keep = real_positions(inputs)
    assert not keep.all()
    extra = dict(output_hidden_states=True, output_attentions=attn == "eager" and not unpad)
    ref_out, our_out = ref(**inputs, **extra), ours(**inputs, **extra)
    qa_masked = unpad and task == "question-answering"
    skip = ("logits",) if task == "causal-lm" else ("loss",) if qa_masked else ()
    attentions = tuple(f"attentions.{i}" for i in range(len(our_out.attentions or ())))
    if attn == "eager" and not unpad:
        # At padding positions whose query sees no key (left padding, the window past a row's end) the reference's
        # eager kernel averages the masked values uniformly, ours (and SDPA) gives zeros: real positions only.
        assert_real_positions_match(our_out, ref_out, keep, skip=skip + attentions)
    else:
        assert_outputs_match(our_out, ref_out, keep, unpadded=unpad, atol=ATOL, rtol=RTOL, skip=skip + attentions)
    for ours_w, ref_w in zip(our_out.attentions or (), ref_out.attentions or (), strict=True):
        # (B, H, T, T) at real query rows: a query without any visible key (padding) holds zeros here and the
        # reference's uniform weights over its masked keys
        assert_close(ours_w.transpose(1, 2)[keep], ref_w.transpose(1, 2)[keep], atol=ATOL, rtol=RTOL)
    if task == "causal-lm":
        assert our_out.logits is None  # training with labels: the chunked loss forms no logits
    if task == "base":
        loss_ref, loss_ours = (masked_base_loss(out, keep) for out in (ref_out, our_out))
    elif qa_masked:
        loss_ref, loss_ours = reference_qa_loss(ref_out, inputs), our_out.loss
        assert_close(loss_ours, loss_ref, atol=ATOL, rtol=RTOL)
    else:
        loss_ref, loss_ours = ref_out.loss, our_out.loss
    assert torch.isfinite(loss_ref)
    loss_ref.backward()
    loss_ours.backward()
    assert_same_gradients(ref, ours, variant, task)


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("task", list(HEAD_SUFFIXES))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_parity_every_head_and_variant(variant, task, unpad, left):
    check_parity(variant, task, "sdpa", unpad, left)


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("task", ["causal-lm", "sequence-classification"])
@pytest.mark.parametrize("variant", ["llama-gqa", "mistral", "qwen2"])
def test_parity_eager(variant, task, unpad, left):
    check_parity(variant, task, "eager", unpad, left)


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_causal_lm_dense_loss_and_eval_logits_match(variant, unpad):
    """`chunked_lm_loss=False` returns the full logits in training, and eval mode always does."""
    ref, ours = build_pair(variant, "causal-lm", "sdpa")
    ours.config.chunked_lm_loss, ours.config.unpad_inputs = False, unpad
    inputs = make_inputs("causal-lm", left=False)
    keep = real_positions(inputs)
    assert_outputs_match(ours(**inputs), ref(**inputs), keep, unpadded=unpad, atol=ATOL, rtol=RTOL)
    ref.eval(), ours.eval()
    with torch.no_grad():
        assert_outputs_match(ours(**inputs), ref(**inputs), keep, unpadded=unpad, atol=ATOL, rtol=RTOL)
