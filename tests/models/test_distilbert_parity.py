"""DistilBERT against transformers, through the production converter.

Every head, eager and sdpa, padded batches: every hidden state, logits, loss and the gradient of every
parameter after one backward pass, at fp32 atol 1e-5; then the round trip back to transformers is exact.
"""

import pytest
import torch
import transformers
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.models.conversion import convert_state_dict
from ._parity import (
    assert_outputs_match,
    grads_of,
    masked_base_loss,
    real_positions,
    reference_qa_loss,
    with_task_labels,
)

ATOL, RTOL = 1e-5, 1e-5
VOCAB = 99

HEADS = {
    "base": "DistilBertModel",
    "masked-lm": "DistilBertForMaskedLM",
    "sequence-classification": "DistilBertForSequenceClassification",
    "token-classification": "DistilBertForTokenClassification",
    "question-answering": "DistilBertForQuestionAnswering",
    "multiple-choice": "DistilBertForMultipleChoice",
}

TINY = dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64,
            dropout=0.0, attention_dropout=0.0, qa_dropout=0.0, seq_classif_dropout=0.0)


def tiny_config(**overrides):
    return transformers.DistilBertConfig(**{**TINY, **overrides})


def padded_batch(batch=3, seq_len=11, seed=0):
    """Right padding: row 1 keeps 7 tokens, row 2 keeps 4."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    return ids.masked_fill(mask == 0, 0), mask


def make_inputs(task, seed=0):
    ids, mask = padded_batch(seed=seed)
    return with_task_labels(dict(input_ids=ids, attention_mask=mask), task, seed + 1)


def build_pair(task, attn="sdpa", **overrides):
    num_labels = 2 if task == "question-answering" else 3  # DistilBERT's QA head insists on 2
    ref = getattr(transformers, HEADS[task])._from_config(tiny_config(num_labels=num_labels, **overrides),
                                                          attn_implementation=attn)
    ours = hf_xfmr.from_transformers(ref)
    assert type(ours).__name__ == "Xfmr" + HEADS[task]
    assert ours.config._attn_implementation == attn
    return ref, ours


def check_outputs_and_gradients(ref, ours, task, inputs, attn, unpad=True):
    """With unpadding (the default) outputs at real positions (zeros at padding) and question answering
    against the reference's span loss over real tokens; with `unpad_inputs=False` every position."""
    assert ours.config.unpad_inputs  # the default
    ours.config.unpad_inputs = unpad
    ref.train(), ours.train()  # dropout is 0: training mode is deterministic and builds gradients
    keep = real_positions(inputs)
    assert not keep.all()
    # Attention weights need the padded path: asked for (eager) only where unpadding is off.
    extra = dict(output_hidden_states=True, output_attentions=attn == "eager" and not unpad)
    ref_out, our_out = ref(**inputs, **extra), ours(**inputs, **extra)
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
    assert torch.isfinite(loss_ref)
    loss_ref.backward()
    loss_ours.backward()
    ref_grads = convert_state_dict(grads_of(ref), "distilbert", task, to_hf=False)
    our_grads = grads_of(ours)
    assert len(our_grads) == len(list(ours.parameters()))
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("task", list(HEADS))
def test_parity_outputs_loss_and_gradients(task, attn, unpad):
    ref, ours = build_pair(task, attn)
    check_outputs_and_gradients(ref, ours, task, make_inputs(task), attn, unpad)


@pytest.mark.parametrize("overrides", [
    dict(activation="relu"), dict(activation="gelu_new"), dict(tie_word_embeddings=False),
    dict(sinusoidal_pos_embds=True),
])
def test_parity_for_config_variants(overrides):
    ref, ours = build_pair("masked-lm", **overrides)
    for key, value in overrides.items():
        assert getattr(ours.config, key) == value
    tied = ours.lm_head.decoder.weight is ours.model.embeddings.word_embeddings.weight
    assert tied == overrides.get("tie_word_embeddings", True)
    check_outputs_and_gradients(ref, ours, "masked-lm", make_inputs("masked-lm"), "sdpa")


def test_sinusoidal_positions_are_initialised_like_the_reference():
    torch.manual_seed(0)
    ref = transformers.DistilBertModel(tiny_config(sinusoidal_pos_embds=True))
    ours = hf_xfmr.models.distilbert.XfmrDistilBertModel(hf_xfmr.from_transformers(ref).config)
    table = ours.embeddings.position_embeddings.weight
    assert_close(table, ref.embeddings.position_embeddings.weight, atol=1e-6, rtol=0)
    assert_close(table[0, :4], torch.tensor([0.0, 1.0, 0.0, 1.0]))  # sin(0), cos(0), ...
    assert table.requires_grad  # trainable, as in transformers 5


@pytest.mark.parametrize("task", list(HEADS))
def test_round_trip_is_exact(task):
    ref, ours = build_pair(task)
    back = hf_xfmr.to_transformers(ours)
    assert type(back) is type(ref)
    ref_state, back_state = ref.state_dict(), back.state_dict()
    assert ref_state.keys() == back_state.keys()
    for name in ref_state:
        assert torch.equal(ref_state[name], back_state[name]), name
    again = hf_xfmr.from_transformers(back)
    assert again.config.to_diff_dict() == ours.config.to_diff_dict()
    for (name, a), (_, b) in zip(ours.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_two_layer_classifier_maps_onto_pre_classifier_and_classifier():
    ref, ours = build_pair("sequence-classification")
    assert torch.equal(ours.classifier.dense.weight, ref.pre_classifier.weight)
    assert torch.equal(ours.classifier.out_proj.weight, ref.classifier.weight)
    ref_tokens, ours_tokens = build_pair("token-classification")
    assert torch.equal(ours_tokens.classifier.weight, ref_tokens.classifier.weight)  # a plain linear there


def test_inputs_embeds_explicit_positions_and_pad_content():
    ref, ours = build_pair("base")
    ref.eval(), ours.eval()
    ids, mask = padded_batch()
    keep = mask.bool()  # unpadded (the default): outputs at real positions equal the reference's
    embeds = ref.get_input_embeddings()(ids)
    assert_close(ours(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[keep],
                 ref(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[keep], atol=ATOL, rtol=RTOL)
    positions = torch.arange(ids.shape[1]).flip(0).expand_as(ids)
    assert_close(ours(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state[keep],
                 ref(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state[keep],
                 atol=ATOL, rtol=RTOL)
    noisy = torch.where(mask == 1, ids, torch.randint(3, VOCAB, ids.shape))
    a = ours(input_ids=ids, attention_mask=mask).last_hidden_state
    b = ours(input_ids=noisy, attention_mask=mask).last_hidden_state
    assert_close(a[mask.bool()], b[mask.bool()], atol=1e-6, rtol=0)


def test_sparse_prediction_gives_the_reference_loss():
    ref, ours = build_pair("masked-lm")
    ours.train()
    inputs = make_inputs("masked-lm")
    dense = ours(**inputs)
    ours.config.sparse_prediction = True
    sparse = ours(**inputs)
    labelled = inputs["labels"] != -100
    assert sparse.logits.shape == (int(labelled.sum()), VOCAB)
    assert_close(sparse.logits, dense.logits[labelled], atol=1e-6, rtol=0)
    assert_close(sparse.loss, ref(**inputs).loss, atol=ATOL, rtol=RTOL)
    ours.eval()
    assert ours(**inputs).logits.shape == (*inputs["input_ids"].shape, VOCAB)


def test_convert_from_directory_and_pick_a_new_head(tmp_path):
    ref = transformers.DistilBertForMaskedLM(tiny_config()).eval()
    ref.save_pretrained(tmp_path)
    ours = hf_xfmr.from_transformers(tmp_path)
    assert type(ours).__name__ == "XfmrDistilBertForMaskedLM"
    ids, mask = padded_batch()
    keep = mask.bool()  # unpadded (the default): outputs at real positions equal the reference's
    assert_close(ours(input_ids=ids, attention_mask=mask).logits[keep],
                 ref(input_ids=ids, attention_mask=mask).logits[keep], atol=ATOL, rtol=RTOL)
    qa = hf_xfmr.from_transformers(tmp_path, task="question-answering")
    assert type(qa).__name__ == "XfmrDistilBertForQuestionAnswering"
    assert torch.equal(qa.model.layers[1].mlp.up_proj.weight, ref.distilbert.transformer.layer[1].ffn.lin1.weight)
