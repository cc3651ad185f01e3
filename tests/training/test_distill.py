"""Distillation (DistilBERT recipe): student initialisation, the loss against the recipe's formulas, bad
input, and a short run in which the loss falls and the student's top-1 agreement with the teacher rises."""

import json
import random

import pytest
import torch
import transformers
from torch import nn
from torch.testing import assert_close
from transformers import AutoModelForMaskedLM

from hf_xfmr.models.albert import XfmrAlbertConfig, XfmrAlbertForMaskedLM
from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM
from hf_xfmr.models.distilbert import XfmrDistilBertConfig, XfmrDistilBertForMaskedLM
from hf_xfmr.models.roberta import XfmrRobertaConfig, XfmrRobertaForMaskedLM
from hf_xfmr.training.distill import (
    DistillArguments,
    DistillationLoss,
    distill,
    init_student_from_teacher,
    select_layers,
    top1_agreement,
)

from ..conftest import WORDS


def bert_teacher(layers=4, vocab_size=120, **overrides):
    torch.manual_seed(0)
    config = XfmrBertConfig.from_preset("tiny", vocab_size=vocab_size, num_hidden_layers=layers,
                                        max_position_embeddings=64, **overrides)
    return XfmrBertForMaskedLM(config).eval()


def padded_ids(vocab=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    return ids.masked_fill(mask == 0, 0), mask


# -- initialisation ---------------------------------------------------------------------------------
def test_select_layers_takes_one_layer_out_of_two_first_and_last_included():
    assert select_layers(12, 6) == [0, 2, 4, 7, 9, 11]  # the original DistilBERT extraction
    assert select_layers(4, 2) == [0, 3]
    assert select_layers(6, 6) == list(range(6))
    assert select_layers(5, 1) == [0]
    with pytest.raises(ValueError, match=r"deeper \(7 layers, `num_layers` / --student_layers\) than its teacher "
                                         r"\(6 layers\).*Use at most 6 \(DistilBERT uses half: 3\)"):
        select_layers(6, 7)
    with pytest.raises(ValueError, match="`num_layers` \\(--student_layers\\) must be a positive integer, got 0"):
        select_layers(6, 0)


def test_bert_teacher_gives_a_distilbert_student_with_every_other_layer():
    teacher = bert_teacher(layers=4)
    student = init_student_from_teacher(teacher)
    assert type(student) is XfmrDistilBertForMaskedLM
    assert (student.config.n_layers, student.config.dim, student.config.hidden_dim) == (2, 32, 64)
    for j, i in enumerate([0, 3]):
        for name, param in student.model.layers[j].named_parameters():
            assert torch.equal(param, teacher.model.layers[i].get_parameter(name)), (j, name)
    assert torch.equal(student.model.embeddings.word_embeddings.weight, teacher.model.embeddings.word_embeddings.weight)
    assert student.lm_head.decoder.weight is student.model.embeddings.word_embeddings.weight  # still tied
    for name in ("dense.weight", "norm.weight", "decoder.bias"):
        assert torch.equal(student.lm_head.get_parameter(name), teacher.lm_head.get_parameter(name))
    folded = teacher.model.embeddings.position_embeddings.weight + teacher.model.embeddings.token_type_embeddings.weight[0]
    assert torch.equal(student.model.embeddings.position_embeddings.weight, folded)


@pytest.mark.parametrize("teacher_kind", ["bert", "roberta", "transformers-bert", "distilbert"])
def test_a_student_with_all_the_teachers_layers_computes_the_teacher(teacher_kind):
    """The copy is exact: with every layer kept, the student's logits and hidden states are the teacher's."""
    torch.manual_seed(0)
    if teacher_kind == "bert":
        teacher, expected_student = bert_teacher(layers=3), XfmrDistilBertForMaskedLM
    elif teacher_kind == "roberta":
        config = XfmrRobertaConfig.from_preset("tiny", vocab_size=120, num_hidden_layers=3)
        teacher, expected_student = XfmrRobertaForMaskedLM(config).eval(), XfmrRobertaForMaskedLM
    elif teacher_kind == "distilbert":
        config = XfmrDistilBertConfig.from_preset("tiny", vocab_size=120, n_layers=3)
        teacher, expected_student = XfmrDistilBertForMaskedLM(config).eval(), XfmrDistilBertForMaskedLM
    else:
        config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=64)
        teacher, expected_student = transformers.BertForMaskedLM(config).eval(), XfmrDistilBertForMaskedLM
    student = init_student_from_teacher(teacher, num_layers=3).eval()
    assert type(student) is expected_student and student.config.num_hidden_layers == 3
    ids, mask = padded_ids()
    pad = 1 if teacher_kind == "roberta" else 0
    ids = ids.masked_fill(mask == 0, pad)
    t = teacher(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    s = student(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    # Real positions only: an unpadded hf_xfmr model (the default) holds zeros at padding, transformers' does not.
    real = mask.bool()
    assert_close(s.logits[real], t.logits[real], atol=1e-5, rtol=1e-5)
    assert_close(s.hidden_states[-1][real], t.hidden_states[-1][real], atol=1e-5, rtol=1e-5)


def test_same_architecture_student_and_explicit_layers():
    teacher = bert_teacher(layers=4)
    student = init_student_from_teacher(teacher, "same", layers=[1, 2, 3])
    assert type(student) is XfmrBertForMaskedLM and student.config.num_hidden_layers == 3
    assert torch.equal(student.model.layers[0].attn.q_proj.weight, teacher.model.layers[1].attn.q_proj.weight)
    assert torch.equal(student.model.embeddings.token_type_embeddings.weight,
                       teacher.model.embeddings.token_type_embeddings.weight)  # kept, not folded
    assert teacher.config.num_hidden_layers == 4  # the teacher's config is not touched


def test_bad_student_requests_name_the_argument_and_the_fix():
    teacher = bert_teacher(layers=4)
    with pytest.raises(ValueError, match=r"Hidden size mismatch: the student has hidden size 64 but the teacher 32.*"
                                         r"give the student hidden size 32"):
        init_student_from_teacher(teacher, XfmrDistilBertConfig.from_preset("tiny", vocab_size=120, dim=64, n_layers=2))
    with pytest.raises(ValueError, match=r"deeper \(6 layers, `num_layers` / --student_layers\) than its teacher "
                                         r"\(4 layers\)"):
        init_student_from_teacher(teacher, num_layers=6)
    with pytest.raises(ValueError, match=r"deeper \(5 layers"):
        init_student_from_teacher(teacher, XfmrDistilBertConfig.from_preset("tiny", vocab_size=120, n_layers=5))
    with pytest.raises(ValueError, match=r"`layers` \(--student_layer_ids\) \[3, 1\] must be increasing indices of "
                                         r"the teacher's 4 layers \(0 to 3\)"):
        init_student_from_teacher(teacher, num_layers=2, layers=[3, 1])
    with pytest.raises(ValueError, match=r"`layers` \(--student_layer_ids\) names 3 teacher layers for a student of "
                                         r"2 layers \(`num_layers` / --student_layers\)"):
        init_student_from_teacher(teacher, num_layers=2, layers=[0, 1, 2])
    with pytest.raises(ValueError, match="`student`='tiny' is not a student architecture"):
        init_student_from_teacher(teacher, "tiny")
    roberta = XfmrRobertaForMaskedLM(XfmrRobertaConfig.from_preset("tiny", num_hidden_layers=2))
    with pytest.raises(ValueError, match="xfmr-distilbert student cannot start from a xfmr-roberta teacher.*"
                                         "student='same'"):
        init_student_from_teacher(roberta, "distilbert")
    albert = XfmrAlbertForMaskedLM(XfmrAlbertConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match="`model.layers`.*ALBERT shares one set of layers"):
        init_student_from_teacher(albert)
    with pytest.raises(ValueError, match="vocab_size.*|do not all exist in the teacher"):
        init_student_from_teacher(teacher, XfmrDistilBertConfig.from_preset("tiny", vocab_size=99, n_layers=2))


# -- the loss ---------------------------------------------------------------------------------------
def recipe_loss(s_logits, t_logits, s_hidden, t_hidden, mask, labels, T=2.0, a_ce=5.0, a_mlm=2.0, a_cos=1.0):
    """The loss as the DistilBERT training code writes it (masked_select, KLDivLoss batchmean, ...)."""
    sel = mask.unsqueeze(-1).expand_as(s_logits).bool()
    s = torch.masked_select(s_logits, sel).view(-1, s_logits.size(-1))
    t = torch.masked_select(t_logits, sel).view(-1, t_logits.size(-1))
    ce = nn.KLDivLoss(reduction="batchmean")(nn.functional.log_softmax(s / T, -1), nn.functional.softmax(t / T, -1))
    mlm = nn.CrossEntropyLoss(ignore_index=-100)(s_logits.view(-1, s_logits.size(-1)), labels.view(-1))
    sel_h = mask.unsqueeze(-1).expand_as(s_hidden).bool()
    sh = torch.masked_select(s_hidden, sel_h).view(-1, s_hidden.size(-1))
    th = torch.masked_select(t_hidden, sel_h).view(-1, t_hidden.size(-1))
    cos = nn.CosineEmbeddingLoss(reduction="mean")(sh, th, sh.new_ones(sh.shape[0]))
    return a_ce * ce * T**2 + a_mlm * mlm + a_cos * cos, ce * T**2, mlm, cos


def loss_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    _, mask = padded_ids(seed=seed)
    s_logits, t_logits = torch.randn(3, 12, 50, generator=g) * 3, torch.randn(3, 12, 50, generator=g) * 3
    s_hidden, t_hidden = torch.randn(3, 12, 16, generator=g), torch.randn(3, 12, 16, generator=g)
    labels = torch.randint(0, 50, (3, 12), generator=g).masked_fill(torch.rand(3, 12, generator=g) > 0.3, -100)
    labels[0, 0] = 7
    return s_logits.requires_grad_(), t_logits, s_hidden.requires_grad_(), t_hidden, mask, labels


@pytest.mark.parametrize("weights", [dict(), dict(temperature=1.0, alpha_ce=0.5, alpha_mlm=0.0, alpha_cos=3.0)])
def test_loss_equals_the_recipe_formulas_and_ignores_padding(weights):
    s_logits, t_logits, s_hidden, t_hidden, mask, labels = loss_inputs()
    ours = DistillationLoss(**weights)(s_logits, t_logits, s_hidden, t_hidden, mask, labels)
    kw = {"T": weights.get("temperature", 2.0), "a_ce": weights.get("alpha_ce", 5.0),
          "a_mlm": weights.get("alpha_mlm", 2.0), "a_cos": weights.get("alpha_cos", 1.0)}
    total, ce, mlm, cos = recipe_loss(s_logits, t_logits, s_hidden, t_hidden, mask, labels, **kw)
    assert_close(ours.loss, total, atol=1e-5, rtol=1e-5)
    assert_close(ours.ce, ce.detach(), atol=1e-5, rtol=1e-5)
    assert_close(ours.cos, cos.detach(), atol=1e-6, rtol=1e-5)
    if kw["a_mlm"]:
        assert_close(ours.mlm, mlm.detach(), atol=1e-5, rtol=1e-5)
    grad_ours = torch.autograd.grad(ours.loss, (s_logits, s_hidden))
    grad_recipe = torch.autograd.grad(total, (s_logits, s_hidden))
    for a, b in zip(grad_ours, grad_recipe):
        assert_close(a, b, atol=1e-6, rtol=1e-5)
    # Whatever sits at padded positions (with no label there) does not count.
    pad = (mask == 0).unsqueeze(-1)
    noisy = DistillationLoss(**weights)(s_logits + 100 * pad, t_logits - 50 * pad, s_hidden + 9 * pad,
                                        t_hidden, mask, labels)
    assert_close(noisy.loss, ours.loss, atol=1e-5, rtol=1e-5)


def test_loss_rejects_mismatched_models_and_bad_settings():
    s_logits, t_logits, s_hidden, t_hidden, mask, labels = loss_inputs()
    loss = DistillationLoss()
    with pytest.raises(ValueError, match="Student logits .* and teacher logits .* differ: .*same tokenizer"):
        loss(s_logits[..., :40], t_logits, s_hidden, t_hidden, mask, labels)
    with pytest.raises(ValueError, match=r"Hidden size mismatch: student hidden states \(3, 12, 8\), teacher "
                                         r"\(3, 12, 16\).*set alpha_cos=0"):
        loss(s_logits, t_logits, s_hidden[..., :8], t_hidden, mask, labels)
    with pytest.raises(ValueError, match="alpha_mlm > 0 needs MLM `labels`"):
        loss(s_logits, t_logits, s_hidden, t_hidden, mask)
    with pytest.raises(ValueError, match=r"`temperature` \(--temperature\) must be > 0, got 0"):
        DistillationLoss(temperature=0)
    with pytest.raises(ValueError, match=r"`alpha_cos` \(--alpha_cos\) must be >= 0, got -1"):
        DistillationLoss(alpha_cos=-1)
    with pytest.raises(ValueError, match="At least one of"):
        DistillationLoss(alpha_ce=0, alpha_mlm=0, alpha_cos=0)


# -- a short run --------------------------------------------------------------------------------------
def corpus(n=120, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 40))) + "." for _ in range(n)]


def test_short_distillation_lowers_the_loss_and_raises_agreement(wordpiece_tokenizer, tmp_path, one_thread):
    tok = wordpiece_tokenizer
    torch.manual_seed(0)
    # A random teacher with a wide initialisation has confident, input-dependent predictions to copy.
    config = XfmrBertConfig.from_preset("tiny", vocab_size=len(tok), num_hidden_layers=4, max_position_embeddings=64,
                                        initializer_range=0.3)
    teacher = XfmrBertForMaskedLM(config).eval()
    teacher_before = {n: p.clone() for n, p in teacher.state_dict().items()}
    result = distill(DistillArguments(
        teacher=teacher, tokenizer=tok, corpus=corpus(), output_dir=str(tmp_path / "student"), max_seq_length=32,
        max_steps=30, batch_size=16, learning_rate=1e-2, eval_sequences=24, progress=False,
    ))
    losses = [h["loss"] for h in result.history]
    assert len(losses) == 30 and all(h["lr"] >= 0 for h in result.history)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses
    ce = [h["ce"] for h in result.history]
    assert sum(ce[-5:]) < 0.5 * sum(ce[:5]), ce
    assert result.agreement_after > result.agreement_before + 0.2, (result.agreement_before, result.agreement_after)
    for name, value in teacher.state_dict().items():  # the teacher is only read
        assert torch.equal(value, teacher_before[name]), name

    out = tmp_path / "student"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    log = json.loads((out / "distill_log.json").read_text())
    assert log["student"] == "xfmr-distilbert" and log["student_layers"] == 2 and len(log["history"]) == 30
    assert log["agreement_after"] == result.agreement_after
    reloaded = AutoModelForMaskedLM.from_pretrained(out).eval()
    assert type(reloaded) is XfmrDistilBertForMaskedLM
    ids, mask = padded_ids(vocab=len(tok))
    assert_close(reloaded(input_ids=ids, attention_mask=mask).logits,
                 result.student.eval()(input_ids=ids, attention_mask=mask).logits)


def test_roberta_teacher_distils_into_a_roberta_student(wordpiece_tokenizer, one_thread):
    tok = wordpiece_tokenizer
    torch.manual_seed(0)
    config = XfmrRobertaConfig.from_preset("tiny", vocab_size=len(tok), num_hidden_layers=2, pad_token_id=tok.pad_token_id,
                                           bos_token_id=None, eos_token_id=None)
    teacher = XfmrRobertaForMaskedLM(config).eval()
    result = distill(DistillArguments(teacher=teacher, tokenizer=tok, corpus=corpus(40), max_seq_length=24,
                                      max_steps=3, batch_size=8, eval_sequences=8, progress=False))
    assert type(result.student) is XfmrRobertaForMaskedLM and result.student.config.num_hidden_layers == 1
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in result.history)
    assert 0.0 <= result.agreement_after <= 1.0


def test_top1_agreement_counts_real_tokens_only():
    teacher = bert_teacher(layers=2, initializer_range=0.3)
    ids, mask = padded_ids()
    batch = {"input_ids": ids, "attention_mask": mask}
    assert top1_agreement(teacher, teacher, [batch]) == 1.0
    student = init_student_from_teacher(teacher, num_layers=1)
    with torch.no_grad():
        same = student.eval()(**batch).logits.argmax(-1) == teacher(**batch).logits.argmax(-1)  # (B, T)
    student.train()
    assert top1_agreement(student, teacher, [batch]) == pytest.approx(same[mask.bool()].double().mean().item())
    assert student.training  # restored


def test_distill_arguments_and_run_setup_errors(wordpiece_tokenizer, tmp_path):
    with pytest.raises(ValueError, match="--max_steps must be a positive integer, got 0"):
        DistillArguments(teacher="x", max_steps=0)
    with pytest.raises(ValueError, match="--mlm_probability must be in \\(0, 1\\)"):
        DistillArguments(teacher="x", mlm_probability=1.5)
    with pytest.raises(ValueError, match=r"`alpha_ce` \(--alpha_ce\) must be >= 0"):
        DistillArguments(teacher="x", alpha_ce=-2)
    with pytest.raises(FileNotFoundError, match="is not a checkpoint folder"):
        distill(DistillArguments(teacher=str(tmp_path / "missing")))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    with pytest.raises(FileExistsError, match=r"exists and is not empty; pass --overwrite_output_dir "
                                              r"\(Python: overwrite_output_dir=True\)"):
        distill(DistillArguments(teacher=bert_teacher(), output_dir=str(tmp_path / "full")))
    with pytest.raises(ValueError, match="Pass `tokenizer`"):
        distill(DistillArguments(teacher=bert_teacher()))
    big = XfmrDistilBertForMaskedLM(XfmrDistilBertConfig.from_preset("tiny", vocab_size=len(wordpiece_tokenizer),
                                                                     dim=64, n_layers=1))
    small_teacher = bert_teacher(vocab_size=len(wordpiece_tokenizer))
    with pytest.raises(ValueError, match="Hidden size mismatch: the student has hidden size 64 but the teacher 32"):
        distill(DistillArguments(teacher=small_teacher, tokenizer=wordpiece_tokenizer, student=big, corpus=corpus(10)))
    with pytest.raises(ValueError, match="tokenizer has .* tokens but the teacher only 50"):
        distill(DistillArguments(teacher=bert_teacher(vocab_size=50), tokenizer=wordpiece_tokenizer))
