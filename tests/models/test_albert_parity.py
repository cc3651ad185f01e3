"""ALBERT against transformers, through the production converter.

Every head, eager and sdpa, padded batches with token types, a config with two groups of two shared
layers: every hidden state, logits, loss and the gradient of every parameter after one backward pass,
at fp32 atol 1e-5; then the round trip back to transformers is exact.
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
    "base": "AlbertModel",
    "pretraining": "AlbertForPreTraining",
    "masked-lm": "AlbertForMaskedLM",
    "sequence-classification": "AlbertForSequenceClassification",
    "token-classification": "AlbertForTokenClassification",
    "question-answering": "AlbertForQuestionAnswering",
    "multiple-choice": "AlbertForMultipleChoice",
}

# 4 layer applications drawn from 2 groups of 2 distinct layers: sharing and grouping both exercised.
TINY = dict(vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_hidden_groups=2,
            inner_group_num=2, num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)


def tiny_config(**overrides):
    return transformers.AlbertConfig(**{**TINY, **overrides})


def padded_batch(batch=3, seq_len=11, seed=0):
    """Right padding (row 1 keeps 7 tokens, row 2 keeps 4), a mask and segment A/B token types."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, seq_len), generator=g)
    mask = torch.ones(batch, seq_len, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    types = torch.zeros_like(ids)
    types[:, seq_len // 2:] = 1
    return ids, mask, types


def make_inputs(task, seed=0):
    ids, mask, types = padded_batch(seed=seed)
    return with_task_labels(dict(input_ids=ids, attention_mask=mask, token_type_ids=types), task, seed + 1,
                            pair_label="sentence_order_label")


def build_pair(task, attn="sdpa", **overrides):
    num_labels = 3 if task in ("sequence-classification", "token-classification") else 2
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
    assert len(our_out.hidden_states) == 1 + ours.config.num_hidden_layers * ours.config.inner_group_num

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
    ref_grads = convert_state_dict(grads_of(ref), "albert", task, to_hf=False)
    our_grads = grads_of(ours)
    assert len(our_grads) == len(list(ours.parameters()))  # every parameter (shared ones once) got a gradient
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("task", list(HEADS))
def test_parity_outputs_loss_and_gradients(task, attn, unpad):
    ref, ours = build_pair(task, attn)
    check_outputs_and_gradients(ref, ours, task, make_inputs(task), attn, unpad)


@pytest.mark.parametrize("overrides", [
    dict(num_hidden_groups=1, inner_group_num=1),  # every published ALBERT: one layer applied 4 times
    dict(num_hidden_groups=4, inner_group_num=1),  # no sharing at all
    dict(num_hidden_groups=1, inner_group_num=3, hidden_act="relu"),
    dict(tie_word_embeddings=False, hidden_act="gelu", layer_norm_eps=1e-5),
])
def test_parity_for_sharing_layouts_and_config_variants(overrides):
    ref, ours = build_pair("masked-lm", "sdpa", **overrides)
    for key, value in overrides.items():
        assert getattr(ours.config, key) == value
    expected = overrides.get("num_hidden_groups", 2) * overrides.get("inner_group_num", 2)
    assert sum(1 for _ in ours.model.layer_groups.modules() if type(_).__name__ == "XfmrAlbertLayer") == expected
    tied = ours.lm_head.decoder.weight is ours.model.embeddings.word_embeddings.weight
    assert tied == overrides.get("tie_word_embeddings", True)
    check_outputs_and_gradients(ref, ours, "masked-lm", make_inputs("masked-lm"), "sdpa")


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


def test_inputs_embeds_explicit_positions_and_pad_content():
    ref, ours = build_pair("base")
    ref.eval(), ours.eval()
    ids, mask, types = padded_batch()
    keep = mask.bool()  # unpadded (the default): outputs at real positions equal the reference's
    embeds = ref.get_input_embeddings()(ids)  # (B, T, E): the small embedding space
    assert embeds.shape[-1] == 16
    assert_close(ours(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[keep],
                 ref(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[keep], atol=ATOL, rtol=RTOL)
    positions = torch.arange(ids.shape[1]).flip(0).expand_as(ids)
    assert_close(ours(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state[keep],
                 ref(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state[keep],
                 atol=ATOL, rtol=RTOL)
    noisy = torch.where(mask == 1, ids, torch.randint(3, VOCAB, ids.shape))
    a = ours(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    b = ours(input_ids=noisy, attention_mask=mask, token_type_ids=types).last_hidden_state
    assert_close(a[mask.bool()], b[mask.bool()], atol=1e-6, rtol=0)


@pytest.mark.parametrize("task", ["masked-lm", "pretraining"])
def test_sparse_prediction_gives_the_reference_loss(task):
    ref, ours = build_pair(task)
    ours.train()
    inputs = make_inputs(task)
    dense = ours(**inputs)
    ours.config.sparse_prediction = True
    sparse = ours(**inputs)
    key = "logits" if task == "masked-lm" else "prediction_logits"
    labelled = inputs["labels"] != -100
    assert sparse[key].shape == (int(labelled.sum()), VOCAB)
    assert_close(sparse[key], dense[key][labelled], atol=1e-6, rtol=0)
    assert_close(sparse.loss, ref(**inputs).loss, atol=ATOL, rtol=RTOL)
    ours.eval()  # evaluation (Trainer.evaluate / predict) gets the full logits back
    assert ours(**inputs)[key].shape == (*inputs["input_ids"].shape, VOCAB)


def test_pretraining_without_sop_label_gives_the_mlm_loss():
    ref, ours = build_pair("pretraining")
    inputs = make_inputs("pretraining")
    sop = inputs.pop("sentence_order_label")
    mlm_only = ours(**inputs).loss
    masked = transformers.AlbertForMaskedLM(ref.config)
    masked.load_state_dict(ref.state_dict(), strict=False)
    assert_close(mlm_only, masked(**inputs).loss, atol=ATOL, rtol=RTOL)
    full = ours(**inputs, sentence_order_label=sop)
    assert_close(full.loss, ref(**inputs, sentence_order_label=sop).loss, atol=ATOL, rtol=RTOL)


def test_convert_from_directory_and_pick_a_new_head(tmp_path):
    ref = transformers.AlbertForPreTraining(tiny_config()).eval()
    ref.save_pretrained(tmp_path)
    ours = hf_xfmr.from_transformers(tmp_path)
    assert type(ours).__name__ == "XfmrAlbertForPreTraining"
    ids, mask, types = padded_batch()
    keep = mask.bool()  # unpadded (the default): outputs at real positions equal the reference's
    assert_close(ours(input_ids=ids, attention_mask=mask).prediction_logits[keep],
                 ref(input_ids=ids, attention_mask=mask).prediction_logits[keep], atol=ATOL, rtol=RTOL)
    classifier = hf_xfmr.from_transformers(tmp_path, task="sequence-classification")
    assert type(classifier).__name__ == "XfmrAlbertForSequenceClassification"
    assert torch.equal(classifier.model.layer_groups[1].layers[0].attn.q_proj.weight,
                       ref.albert.encoder.albert_layer_groups[1].albert_layers[0].attention.query.weight)


def test_uneven_groups_in_a_transformers_checkpoint_are_refused():
    ref = transformers.AlbertModel(tiny_config(num_hidden_layers=3, num_hidden_groups=2))
    with pytest.raises(ValueError, match="num_hidden_groups=2, which does not divide num_hidden_layers=3"):
        hf_xfmr.from_transformers(ref)
