"""Mixtral against transformers, through the production converter.

Every head of two tiny variants (GQA with top-2 routing; a sliding window shorter than the batch, tied embeddings
and top-1 routing), right- and left-padded batches, unpadded (the default) and with `unpad_inputs=False`: hidden
states, logits, router logits, the load-balancing loss, the loss and the gradient of every parameter, fp32
atol/rtol 1e-5. Unpadded, per-position outputs (router logits included) are compared at real positions and must
hold zeros at padding; question answering against the reference's span loss over real tokens.
"""

import pytest
import torch
from torch.testing import assert_close

from hf_xfmr.models.conversion import convert_state_dict, to_transformers

from ._llama import padded_batch
from ._mixtral import HEAD_SUFFIXES, VARIANTS, pair
from ._parity import assert_outputs_match, grads_of, masked_base_loss, real_positions, reference_qa_loss
from .test_llama_parity import make_inputs

ATOL, RTOL = 1e-5, 1e-5


def build_pair(variant, task, attn="sdpa"):
    num_labels = 2 if task == "question-answering" else 3
    ref, ours = pair(variant, task, attn, num_labels=num_labels, classifier_dropout=0.0)
    assert type(ours).__name__ == "XfmrMixtral" + HEAD_SUFFIXES[task]
    return ref.train(), ours.train()  # no dropout and no jitter: training mode is deterministic


def assert_router_logits_match(ours, ref, keep, unpad):
    ours_logits, ref_logits = ours.router_logits, ref.router_logits
    assert len(ours_logits) == len(ref_logits) == 2
    flat_keep = keep.reshape(-1)
    for a, b in zip(ours_logits, ref_logits, strict=True):
        assert a.shape == b.shape == (keep.numel(), 4)
        if unpad:  # the router saw the real tokens only: zeros at padding positions
            assert_close(a[flat_keep], b[flat_keep], atol=ATOL, rtol=RTOL)
            assert not a[~flat_keep].any()
        else:
            assert_close(a, b, atol=ATOL, rtol=RTOL)


def assert_same_gradients(ref, ours, task):
    ref_grads = convert_state_dict(grads_of(ref), "mixtral", task, to_hf=False)
    our_grads = grads_of(ours)
    assert set(our_grads) == set(ref_grads) and len(our_grads) == len(list(ours.parameters()))
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


def check_parity(variant, task, unpad, left, attn="sdpa"):
    ref, ours = build_pair(variant, task, attn)
    assert ours.config.unpad_inputs  # the default
    ours.config.unpad_inputs = unpad
    inputs = make_inputs(task, left)
    keep = real_positions(inputs)
    assert not keep.all()
    ref_out = ref(**inputs, output_hidden_states=True)
    our_out = ours(**inputs, output_hidden_states=True)
    qa_masked = unpad and task == "question-answering"
    skip = ("logits",) if task == "causal-lm" else ("loss",) if qa_masked else ()
    skip += tuple(f"router_logits.{i}" for i in range(2))
    assert_outputs_match(our_out, ref_out, keep, unpadded=unpad, atol=ATOL, rtol=RTOL, skip=skip)
    if task in ("base", "causal-lm"):
        assert_router_logits_match(our_out, ref_out, keep, unpad)
    if task == "causal-lm":
        assert our_out.logits is None  # training with labels: the chunked loss forms no logits
        assert our_out.aux_loss > 0  # compared with the reference's in assert_outputs_match, and in the loss
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
    assert_same_gradients(ref, ours, task)


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("task", list(HEAD_SUFFIXES))
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_parity_every_head(variant, task, unpad, left):
    check_parity(variant, task, unpad, left)


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
def test_parity_eager_causal_lm(unpad):
    check_parity("gqa", "causal-lm", unpad, left=False, attn="eager")


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
def test_aux_loss_off_and_eval_logits(unpad):
    """Without `output_router_logits` no aux loss is added (the LM loss alone); eval mode returns full logits."""
    ref, ours = build_pair("gqa", "causal-lm")
    for model in (ref, ours):
        model.config.output_router_logits = False
    ours.config.unpad_inputs = unpad
    inputs = make_inputs("causal-lm", left=False)
    ref_out, our_out = ref(**inputs), ours(**inputs)
    assert our_out.aux_loss is None and our_out.router_logits is None and ref_out.aux_loss is None
    assert_close(our_out.loss, ref_out.loss, atol=ATOL, rtol=RTOL)
    with torch.no_grad():
        ref_out, our_out = ref.eval()(**inputs), ours.eval()(**inputs)
        keep = real_positions(inputs)
        assert_close(our_out.logits[keep], ref_out.logits[keep], atol=ATOL, rtol=RTOL)
        assert_close(our_out.loss, ref_out.loss, atol=ATOL, rtol=RTOL)


def test_aux_loss_is_added_to_the_lm_loss():
    _, ours = build_pair("gqa", "causal-lm")
    inputs = make_inputs("causal-lm", left=True)
    with_aux = ours(**inputs)
    without = ours(**inputs, output_router_logits=False)
    assert_close(with_aux.loss, without.loss + 0.1 * with_aux.aux_loss, atol=1e-6, rtol=1e-6)


def test_conversion_both_ways_is_exact():
    ref, ours = pair("gqa", "causal-lm")
    back = to_transformers(ours)
    assert type(back).__name__ == "MixtralForCausalLM"
    ref_state, back_state = ref.state_dict(), back.state_dict()
    assert set(ref_state) == set(back_state)
    for key, value in ref_state.items():
        assert torch.equal(back_state[key], value), key
    for name in ("num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "output_router_logits",
                 "router_jitter_noise", "sliding_window", "rope_parameters", "num_key_value_heads"):
        assert getattr(back.config, name) == getattr(ref.config, name), name
    experts = ours.model.layers[0].mlp.experts
    assert tuple(experts.gate_up_proj.shape) == (4, 80, 32) and tuple(experts.down_proj.shape) == (4, 32, 40)
    ids, mask = padded_batch()
    with torch.no_grad():
        assert_close(back(ids, attention_mask=mask).logits, ref(ids, attention_mask=mask).logits, atol=0, rtol=0)
