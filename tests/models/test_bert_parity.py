"""BERT and RoBERTa against transformers, through the production converter.

Every head, eager and sdpa, padded batches with token types: hidden states, logits, loss and the
gradient of every parameter after one backward pass, at fp32 atol 1e-5. With unpadding on (the default)
outputs are compared at real positions (padding positions must hold zeros) and question answering
against the reference's span loss over real tokens; with `unpad_inputs=False` at every position.
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
from .conftest import padded_batch, tiny_hf_config

ATOL, RTOL = 1e-5, 1e-5

HEADS = {
    "bert": {
        "base": "BertModel",
        "pretraining": "BertForPreTraining",
        "masked-lm": "BertForMaskedLM",
        "sequence-classification": "BertForSequenceClassification",
        "token-classification": "BertForTokenClassification",
        "question-answering": "BertForQuestionAnswering",
        "multiple-choice": "BertForMultipleChoice",
    },
    "roberta": {
        "base": "RobertaModel",
        "masked-lm": "RobertaForMaskedLM",
        "sequence-classification": "RobertaForSequenceClassification",
        "token-classification": "RobertaForTokenClassification",
        "question-answering": "RobertaForQuestionAnswering",
        "multiple-choice": "RobertaForMultipleChoice",
    },
}
CASES = [(arch, task) for arch, heads in HEADS.items() for task in heads]


def make_inputs(arch, task, seed=0):
    ids, mask, types = padded_batch(arch, seed=seed)
    return with_task_labels(dict(input_ids=ids, attention_mask=mask, token_type_ids=types), task, seed + 1,
                            pair_label="next_sentence_label")


def build_pair(arch, task, attn, **config_overrides):
    num_labels = 2 if task == "question-answering" else 3  # QA heads score (start, end)
    config = tiny_hf_config(arch, num_labels=num_labels, **config_overrides)
    ref = getattr(transformers, HEADS[arch][task])._from_config(config, attn_implementation=attn)
    ours = hf_xfmr.from_transformers(ref)
    assert type(ours).__name__ == "Xfmr" + HEADS[arch][task].replace("Roberta", "Roberta")
    assert ours.config._attn_implementation == attn
    return ref, ours


@pytest.mark.parametrize("unpad", [True, False], ids=["unpadded", "padded"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch,task", CASES)
def test_parity_outputs_loss_and_gradients(arch, task, attn, unpad):
    ref, ours = build_pair(arch, task, attn)
    assert ours.config.unpad_inputs  # the default
    ours.config.unpad_inputs = unpad
    ref.train(), ours.train()  # dropout is 0, so training mode is deterministic and has gradients
    inputs = make_inputs(arch, task)
    keep = real_positions(inputs)
    assert not keep.all()

    # Attention weights need the padded path: asked for (eager) only where unpadding is off.
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
    ref_grads = convert_state_dict(grads_of(ref), arch, task, to_hf=False)
    our_grads = grads_of(ours)
    assert set(our_grads) <= set(ref_grads) | {"lm_head.decoder.weight"}
    assert len(our_grads) >= len(list(ours.parameters())) - 1
    for name, grad in our_grads.items():
        assert_close(grad, ref_grads[name], atol=ATOL, rtol=RTOL, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("arch,task", CASES)
def test_round_trip_ours_to_transformers_to_ours_is_exact(arch, task):
    _, ours = build_pair(arch, task, "sdpa")
    back = hf_xfmr.from_transformers(hf_xfmr.to_transformers(ours))
    assert type(back) is type(ours)
    assert back.config.to_diff_dict() == ours.config.to_diff_dict()
    for (name, a), (_, b) in zip(ours.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_eval_mode_padded_outputs_ignore_pad_content(arch):
    """Changing the ids under padding must not change any non-pad output (padding is really masked)."""
    _, ours = build_pair(arch, "base", "sdpa")
    ours.eval()
    ids, mask, types = padded_batch(arch)
    noisy = torch.where(mask == 1, ids, torch.randint(3, 99, ids.shape))
    a = ours(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    if arch == "roberta":
        # RoBERTa numbers positions by non-pad tokens; keep them by passing the positions explicitly.
        positions = ours.model.embeddings.default_position_ids(ids, ids.shape[1], ids.device) if hasattr(
            ours, "model") else ours.embeddings.default_position_ids(ids, ids.shape[1], ids.device)
        a = ours(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        b = ours(input_ids=noisy, attention_mask=mask, position_ids=positions).last_hidden_state
    else:
        b = ours(input_ids=noisy, attention_mask=mask, token_type_ids=types).last_hidden_state
    keep = mask.bool()
    assert_close(a[keep], b[keep], atol=1e-6, rtol=0)


@pytest.mark.parametrize("problem_type,labels", [
    ("regression", torch.tensor([0.5, -1.0, 2.0])),
    ("multi_label_classification", torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0]])),
])
def test_sequence_classification_problem_types_match_reference(problem_type, labels):
    num_labels = 1 if problem_type == "regression" else 3
    config = tiny_hf_config("bert", num_labels=num_labels, problem_type=problem_type)
    ref = transformers.BertForSequenceClassification(config).eval()
    ours = hf_xfmr.from_transformers(ref)
    ids, mask, types = padded_batch("bert")


    a = ref(input_ids=ids, attention_mask=mask, labels=labels)
    b = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert_close(b.loss, a.loss, atol=ATOL, rtol=RTOL)
    assert ours.config.problem_type == problem_type


def test_convert_from_directory_and_pick_a_new_head(tmp_path):
    ref = transformers.BertForMaskedLM(tiny_hf_config("bert")).eval()
    ref.save_pretrained(tmp_path)
    ours = hf_xfmr.from_transformers(tmp_path)
    assert type(ours).__name__ == "XfmrBertForMaskedLM"
    ids, mask, types = padded_batch("bert")
    keep = mask.bool()  # unpadded (the default): outputs at real positions equal the reference's
    assert_close(ours(input_ids=ids, attention_mask=mask).logits[keep],
                 ref(input_ids=ids, attention_mask=mask).logits[keep], atol=ATOL, rtol=RTOL)
    classifier = hf_xfmr.from_transformers(str(tmp_path), task="sequence-classification")
    assert type(classifier).__name__ == "XfmrBertForSequenceClassification"
    assert torch.equal(classifier.model.embeddings.word_embeddings.weight, ref.bert.embeddings.word_embeddings.weight)


def test_instance_head_can_be_reduced_to_base_but_not_swapped():
    ref = transformers.BertForMaskedLM(tiny_hf_config("bert"))
    base = hf_xfmr.from_transformers(ref, task="base")
    assert type(base).__name__ == "XfmrBertModel"
    with pytest.raises(ValueError, match="cannot become task 'question-answering'"):
        hf_xfmr.from_transformers(ref, task="question-answering")
    with pytest.raises(ValueError, match="Unknown task 'summarization'.*valid tasks"):
        hf_xfmr.from_transformers(ref, task="summarization")


def test_unsupported_architectures_and_inputs_raise_clear_errors(tmp_path):
    opt = transformers.OPTModel(transformers.OPTConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=2,
                                                       ffn_dim=32, vocab_size=50, word_embed_proj_dim=16,
                                                       max_position_embeddings=32))
    with pytest.raises(ValueError, match="cannot convert transformers model type 'opt'; supported: .*bert"):
        hf_xfmr.from_transformers(opt)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        hf_xfmr.from_transformers(tmp_path)
    with pytest.raises(TypeError, match="PreTrainedModel(,| or) a directory"):
        hf_xfmr.from_transformers(42)
    with pytest.raises(ValueError, match="decoder"):
        hf_xfmr.from_transformers(transformers.BertModel(tiny_hf_config("bert", is_decoder=True)))


def test_sparse_prediction_gives_the_same_loss_and_the_labelled_logits():
    ref, ours = build_pair("bert", "masked-lm", "sdpa")
    ours.train()  # sparse prediction is a training-mode optimisation (dropout is 0 in these configs)
    inputs = make_inputs("bert", "masked-lm")
    dense = ours(**inputs)
    ours.config.sparse_prediction = True
    sparse = ours(**inputs)
    labelled = inputs["labels"] != -100
    assert sparse.logits.shape == (int(labelled.sum()), 99)
    assert_close(sparse.logits, dense.logits[labelled], atol=1e-6, rtol=0)
    assert_close(sparse.loss, dense.loss, atol=1e-6, rtol=0)
    assert_close(sparse.loss, ref(**inputs).loss, atol=ATOL, rtol=RTOL)
    # In eval mode (Trainer.evaluate / predict) and without labels the full logits come back.
    ours.eval()
    evaluated = ours(**inputs)
    assert evaluated.logits.shape == (*inputs["input_ids"].shape, 99)
    assert_close(evaluated.loss, dense.loss, atol=1e-6, rtol=0)
    assert ours(input_ids=inputs["input_ids"]).logits.shape == (*inputs["input_ids"].shape, 99)


@pytest.mark.parametrize("arch", ["bert", "roberta"])
def test_inputs_embeds_and_explicit_positions_match_reference(arch):
    ref, ours = build_pair(arch, "base", "sdpa")
    ref.eval(), ours.eval()
    ids, mask, types = padded_batch(arch)
    keep = mask.bool()  # unpadded (the default): outputs at real positions equal the reference's
    embeds = ref.get_input_embeddings()(ids)
    assert_close(ours(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[keep],
                 ref(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[keep], atol=ATOL, rtol=RTOL)
    positions = torch.arange(ids.shape[1]).flip(0).expand_as(ids) + (2 if arch == "roberta" else 0)
    assert_close(ours(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state[keep],
                 ref(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state[keep],
                 atol=ATOL, rtol=RTOL)


def test_bf16_outputs_track_the_reference():
    """Loose check: in bf16 both sides round differently, but must agree to bf16 precision."""
    ref, ours = build_pair("bert", "masked-lm", "sdpa")
    ref, ours = ref.to(torch.bfloat16).eval(), ours.to(torch.bfloat16).eval()
    inputs = make_inputs("bert", "masked-lm")
    a, b = ref(**inputs), ours(**inputs)
    keep = inputs["attention_mask"].bool()
    assert b.logits.dtype == torch.bfloat16
    assert_close(b.logits[keep].float(), a.logits[keep].float(), atol=0.05, rtol=0.05)
    assert_close(b.loss.float(), a.loss.float(), atol=0.02, rtol=0.01)


@pytest.mark.parametrize("overrides", [
    dict(hidden_act="gelu_new"), dict(hidden_act="relu"), dict(hidden_act="silu"),
    dict(tie_word_embeddings=False), dict(layer_norm_eps=1e-5, classifier_dropout=0.2),
])
def test_config_variants_convert_with_parity(overrides):
    ref = transformers.BertForMaskedLM(tiny_hf_config("bert", **overrides)).eval()
    ours = hf_xfmr.from_transformers(ref).eval()
    for key, value in overrides.items():
        assert getattr(ours.config, key) == value
    tied = ours.lm_head.decoder.weight is ours.model.embeddings.word_embeddings.weight
    assert tied == overrides.get("tie_word_embeddings", True)
    inputs = make_inputs("bert", "masked-lm")
    keep = inputs["attention_mask"].bool()
    assert_close(ours(**inputs).logits[keep], ref(**inputs).logits[keep], atol=ATOL, rtol=RTOL)
    back = hf_xfmr.to_transformers(ours)
    for (name, a), (_, b) in zip(ref.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
