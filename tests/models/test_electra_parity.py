"""ELECTRA against transformers, through the production converter.

Every head, eager and sdpa, padded batches with token types, an embedding size smaller than the hidden size
(the `embeddings_project` path) and, separately, equal to it: hidden states, logits, loss and the gradient of
every parameter after one backward pass, at fp32 atol 1e-5. With unpadding on (the default) outputs are compared
at real positions (padding positions must hold zeros) and question answering against the reference's span loss
over real tokens; with `unpad_inputs=False` at every position. Conversion both ways is bit-exact.
"""

import pytest
import torch
import transformers
from torch.testing import assert_close
from transformers import ElectraConfig

import hf_xfmr
from hf_xfmr.models.conversion import ConversionWarning, convert_state_dict
from hf_xfmr.models.electra import XfmrElectraForSequenceClassification

from ._parity import (
    assert_outputs_match,
    grads_of,
    masked_base_loss,
    real_positions,
    reference_qa_loss,
    with_task_labels,
)
from .conftest import padded_batch

ATOL, RTOL = 1e-5, 1e-5

HEADS = {
    "base": "ElectraModel",
    "pretraining": "ElectraForPreTraining",
    "masked-lm": "ElectraForMaskedLM",
    "sequence-classification": "ElectraForSequenceClassification",
    "token-classification": "ElectraForTokenClassification",
    "question-answering": "ElectraForQuestionAnswering",
    "multiple-choice": "ElectraForMultipleChoice",
}


def tiny_electra_config(**overrides):
    """A tiny ElectraConfig without dropout: embeddings of 16 projected to 32 (the small models' shape)."""
    return ElectraConfig(**{
        **dict(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=37, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
               summary_last_dropout=0.0, max_position_embeddings=64),
        **overrides})


def make_inputs(task, seed=0):
    ids, mask, types = padded_batch("bert", seed=seed)
    inputs = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    if task != "pretraining":
        inputs = with_task_labels(inputs, task, seed + 1)
    else:  # the discriminator's labels: 1 = replaced, 0 = original
        g = torch.Generator().manual_seed(seed + 2)
        inputs["labels"] = torch.randint(0, 2, ids.shape, generator=g)
    return inputs


def build_pair(task, attn, **config_overrides):
    num_labels = 2 if task == "question-answering" else 3  # QA heads score (start, end)
    config = tiny_electra_config(num_labels=num_labels, **config_overrides)
    ref = getattr(transformers, HEADS[task])._from_config(config, attn_implementation=attn)
    ours = hf_xfmr.from_transformers(ref)
    assert type(ours).__name__ == "Xfmr" + HEADS[task]
    assert ours.config._attn_implementation == attn
    return ref, ours


def check_parity(ref, ours, task, unpad, attn):
    assert ours.config.unpad_inputs  # the default
    ours.config.unpad_inputs = unpad
    ref.train(), ours.train()  # dropout is 0, so training mode is deterministic and has gradients
    inputs = make_inputs(task)
    keep = real_positions(inputs)
    assert not keep.all()

    extra = dict(output_hidden_states=True, output_attentions=attn == "eager" and not unpad)
    ref_out = ref(**inputs, **extra)
    our_out = ours(**inputs, **extra)
    qa_masked = unpad and task == "question-answering"
    assert_outputs_match(our_out, ref_out, keep, unpadded=unpad, atol=ATOL, rtol=RTOL,
                         skip=("loss",) if qa_masked else ())

    if task == "base":
        loss_ref, loss_ours = (masked_base_loss(out, keep) for out in (ref_out, our_out))
    elif qa_masked:  # padding positions masked: the reference's span loss over real tokens
        loss_ref, loss_ours = reference_qa_loss(ref_out, inputs), our_out.loss
        assert_close(loss_ours, loss_ref, atol=ATOL, rtol=RTOL)
    else:
        loss_ref, loss_ours = ref_out.loss, our_out.loss
    assert loss_ref is not None and torch.isfinite(loss_ref)
    loss_ref.backward()
    loss_ours.backward()
    ref_grads = convert_state_dict(grads_of(ref), "electra", task, to_hf=False)
    our_grads = grads_of(ours)
    assert set(our_grads) <= set(ref_grads) | {"lm_head.decoder.weight"}
    assert len(our_grads) >= len(list(ours.parameters())) - 1
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")
    return our_out


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("task", list(HEADS))
def test_parity_outputs_loss_and_gradients(task, attn, unpad):
    ref, ours = build_pair(task, attn)
    assert getattr(ours, "model", ours).embeddings.hidden_proj is not None  # embedding_size 16 < hidden_size 32
    check_parity(ref, ours, task, unpad, attn)


@pytest.mark.parametrize("task", ["pretraining", "masked-lm", "multiple-choice"])
def test_parity_without_the_embedding_projection_and_with_other_settings(task):
    """embedding_size == hidden_size (base / large) has no projection; relu, a summary without projection."""
    ref, ours = build_pair(task, "sdpa", embedding_size=32, hidden_act="relu", summary_use_proj=False,
                           summary_activation="tanh" if task == "multiple-choice" else "gelu")
    assert ours.model.embeddings.hidden_proj is None
    assert "electra.embeddings_project.weight" not in ref.state_dict()
    check_parity(ref, ours, task, True, "sdpa")


@pytest.mark.parametrize("task", list(HEADS))
def test_round_trip_ours_to_transformers_to_ours_is_exact(task):
    ref, ours = build_pair(task, "sdpa")
    there = hf_xfmr.to_transformers(ours)
    assert type(there) is type(ref)
    for (name, a), (other, b) in zip(ref.state_dict().items(), there.state_dict().items(), strict=True):
        assert name == other and torch.equal(a, b), name
    back = hf_xfmr.from_transformers(there)
    assert type(back) is type(ours)
    assert back.config.to_diff_dict() == ours.config.to_diff_dict()
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_generator_decoder_is_tied_on_both_sides():
    ref, ours = build_pair("masked-lm", "sdpa")
    assert ours.lm_head.decoder.weight is ours.model.embeddings.word_embeddings.weight
    there = hf_xfmr.to_transformers(ours)
    assert there.generator_lm_head.weight is there.electra.embeddings.word_embeddings.weight


def test_convert_from_directory_and_drop_in_from_pretrained(tmp_path):
    """A transformers checkpoint folder loads into our classes (converted on load), outputs equal."""
    ref = transformers.ElectraForPreTraining(tiny_electra_config()).eval()
    ref.save_pretrained(tmp_path)
    ours = hf_xfmr.from_transformers(tmp_path)
    assert type(ours).__name__ == "XfmrElectraForPreTraining"
    ids, mask, types = padded_batch("bert")
    keep = mask.bool()
    expected = ref(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
    assert_close(ours(input_ids=ids, attention_mask=mask, token_type_ids=types).logits[keep], expected[keep],
                 atol=ATOL, rtol=RTOL)
    with pytest.warns(ConversionWarning, match=r"randomly initialised: classifier\.dense\.bias"):
        classifier = XfmrElectraForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
    assert classifier.config.num_labels == 2
    assert torch.equal(classifier.model.embeddings.word_embeddings.weight,
                       ref.electra.embeddings.word_embeddings.weight)
    assert torch.equal(classifier.model.embeddings.hidden_proj.weight, ref.electra.embeddings_project.weight)


def test_decoder_checkpoints_are_refused():
    with pytest.raises(ValueError, match="decoder"):
        hf_xfmr.from_transformers(transformers.ElectraModel(tiny_electra_config(is_decoder=True)))
