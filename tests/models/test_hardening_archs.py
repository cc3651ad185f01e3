"""The input, label and loss guarantees of the shared heads, checked on every architecture and head.

Each architecture builds its heads from `models/heads.py`, `models/causal_lm.py` and `models/seq2seq.py`
and checks its inputs with `models/input_checks.py`; these tests hold every registered head to the same
promises: labels of the wrong shape are rejected, a batch with nothing to predict gives loss 0 and no
gradient (never NaN), empty inputs get a clear error, positions beyond the table are rejected, and the
forward compiles with `torch.compile(fullgraph=True)`.
"""

import pytest
import torch
from torch.testing import assert_close

from hf_xfmr.models import get_architecture

ARCHS = ["albert", "bart", "bert", "bigbird", "distilbert", "gpt", "modernbert", "roberta", "t5", "xlnet"]
TOKEN_TASKS = ["masked-lm", "causal-lm", "pretraining", "token-classification"]  # labels (B, T)
DROPOUT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob", "dropout",
                  "attention_dropout", "dropout_rate", "resid_pdrop", "embd_pdrop", "attn_pdrop")


def tiny_config(arch: str, **overrides):
    config = get_architecture(arch).config_class.from_preset("tiny", **overrides)
    for name in DROPOUT_FIELDS:  # deterministic outputs: compiled and eager must agree
        if isinstance(getattr(config, name, None), float):
            setattr(config, name, 0.0)
    return config


def build(arch: str, task: str, **overrides):
    torch.manual_seed(0)
    return get_architecture(arch).model_class(task)(tiny_config(arch, **overrides))


def cases(tasks):
    """(arch, task) for every architecture that has a head for one of `tasks`."""
    return [(arch, task) for arch in ARCHS for task in tasks if task in get_architecture(arch).classes]


def batch(model, task: str, shape=(2, 8), seed=0) -> dict:
    """Valid inputs for `model`'s head: ids of `shape` (B, T); (B, 1, T) for multiple choice."""
    config = model.config
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, min(config.vocab_size, 90), shape, generator=g)
    eos = getattr(config, "eos_token_id", None)
    if config.model_type in ("xfmr-t5", "xfmr-bart") and ids.numel():
        ids[:, -1] = eos  # T5's and BART's sequence classification read the last <eos>
    inputs = {"input_ids": ids}
    if task == "multiple-choice":
        inputs["input_ids"] = ids.unsqueeze(1)  # (B, 1, T)
    if config.model_type in ("xfmr-t5", "xfmr-bart") and task == "base":
        inputs["decoder_input_ids"] = ids.clone()
    return inputs


# -- labels whose shape differs from the inputs ----------------------------------------------------
@pytest.mark.parametrize("arch,task", cases(TOKEN_TASKS))
def test_token_labels_of_another_shape_are_rejected(arch, task):
    model = build(arch, task).train()
    inputs = batch(model, task)
    for labels in (torch.zeros(2, 7, dtype=torch.long), torch.zeros(3, 8, dtype=torch.long),
                   torch.zeros(16, dtype=torch.long)):
        with pytest.raises(ValueError, match=rf"`labels` has shape \({', '.join(map(str, labels.shape))},?\) but"):
            model(**inputs, labels=labels)


@pytest.mark.parametrize("arch", [a for a in ARCHS if "seq2seq-lm" in get_architecture(a).classes])
def test_seq2seq_labels_must_match_the_decoder_inputs(arch):
    model = build(arch, "seq2seq-lm").train()
    inputs = batch(model, "seq2seq-lm")
    with pytest.raises(ValueError, match=r"`decoder_input_ids` has shape \(2, 8\) but `labels` has shape \(2, 7\)"):
        model(**inputs, decoder_input_ids=inputs["input_ids"], labels=torch.zeros(2, 7, dtype=torch.long))
    with pytest.raises(ValueError, match="The encoder batch has 2 rows but the decoder inputs 3"):
        model(**inputs, labels=torch.zeros(3, 5, dtype=torch.long))


@pytest.mark.parametrize("arch,task", cases(["sequence-classification", "question-answering", "multiple-choice"]))
def test_sequence_labels_must_match_the_batch(arch, task):
    model = build(arch, task)
    inputs = batch(model, task, shape=(3, 8))
    two = torch.zeros(2, dtype=torch.long)
    if task == "question-answering":
        with pytest.raises(ValueError, match="`start_positions` must hold one index per sequence"):
            model(**inputs, start_positions=two, end_positions=torch.zeros(3, dtype=torch.long))
    elif task == "multiple-choice":
        with pytest.raises(ValueError, match="one choice index per example"):
            model(**inputs, labels=two)
    else:
        with pytest.raises(ValueError, match="`labels` has 2 rows but the batch has 3"):
            model(**inputs, labels=two)


@pytest.mark.parametrize("arch", [arch for arch, _ in cases(["sequence-classification"])])
def test_sequence_classification_labels_of_the_wrong_shape_for_the_problem_type(arch):
    model = build(arch, "sequence-classification", num_labels=3)
    inputs = batch(model, "sequence-classification")
    # Class ids: one per sequence.
    assert torch.isfinite(model(**inputs, labels=torch.tensor([[0], [2]])).loss)
    with pytest.raises(ValueError, match=r"`labels` has shape \(2, 3\), but single label classification takes one "
                                         r"class id per sequence: \(2,\)"):
        model(**inputs, labels=torch.zeros(2, 3, dtype=torch.long))
    # Float labels with num_labels > 1 mean multi-label: (B, num_labels) multi-hot.
    with pytest.raises(ValueError, match=r"`labels` has shape \(2,\), but multi label classification with "
                                         r"num_labels=3 takes \(2, 3\) multi-hot floats"):
        model(**inputs, labels=torch.tensor([0.0, 1.0]))
    assert torch.isfinite(model(**inputs, labels=torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])).loss)
    regression = build(arch, "sequence-classification", num_labels=1)
    with pytest.raises(ValueError, match=r"regression takes one target value per sequence"):
        regression(**inputs, labels=torch.zeros(2, 2))
    model.config.problem_type = "single_label_classification"
    with pytest.raises(ValueError, match="takes integer class ids"):
        model(**inputs, labels=torch.tensor([0.0, 1.0]))


# -- nothing to predict: loss 0, zero gradient ------------------------------------------------------
def _zero_loss_and_gradient(model, loss):
    assert torch.isfinite(loss) and loss.item() == 0.0
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() and torch.count_nonzero(g) == 0 for g in grads)


SPARSE = ["albert", "bert", "distilbert", "roberta"]  # the architectures with `sparse_prediction`


@pytest.mark.parametrize("arch,task,sparse", [(arch, task, False) for arch, task in cases(TOKEN_TASKS + ["seq2seq-lm"])]
                         + [(arch, task, True) for arch, task in cases(["masked-lm", "pretraining"]) if arch in SPARSE])
def test_a_batch_with_nothing_to_predict_gives_loss_zero(arch, task, sparse):
    model = build(arch, task, **({"sparse_prediction": True} if sparse else {})).train()
    inputs = batch(model, task)
    out = model(**inputs, labels=torch.full_like(inputs["input_ids"], -100))
    _zero_loss_and_gradient(model, out.loss)


@pytest.mark.parametrize("arch", [arch for arch, _ in cases(["question-answering"])])
def test_answers_all_truncated_away_give_loss_zero(arch):
    model = build(arch, "question-answering").train()
    inputs = batch(model, "question-answering")
    beyond = torch.full((2,), 8)  # every answer past the end of the (truncated) sequence
    _zero_loss_and_gradient(model, model(**inputs, start_positions=beyond, end_positions=beyond).loss)


# -- empty inputs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(0, 8), (2, 0)])
@pytest.mark.parametrize("arch,task", cases(["base", "masked-lm", "causal-lm", "seq2seq-lm", "sequence-classification",
                                             "token-classification", "question-answering", "multiple-choice"]))
def test_empty_inputs_get_a_clear_error(arch, task, shape):
    model = build(arch, task).eval()
    with pytest.raises(ValueError, match=r"The inputs are empty \(batch, seq_len\)"):
        model(**batch(model, task, shape=shape))


# -- sequence length and position_ids against the position table -------------------------------------
TABLES = ["albert", "bert", "distilbert", "gpt", "roberta"]  # XLNet and T5 use relative positions: no table


@pytest.mark.parametrize("arch", TABLES)
def test_the_length_limit_is_the_usable_table(arch):
    model = build(arch, "base", max_position_embeddings=34).eval()
    # RoBERTa numbers positions from pad_token_id + 1 = 2: its table of 34 holds 32 tokens.
    usable = 32 if arch == "roberta" else 34
    assert model(input_ids=torch.full((1, usable), 5)).last_hidden_state.shape[1] == usable
    with pytest.raises(ValueError, match=rf"{usable + 1} tokens exceed the {usable} positions|Sequence length "
                                         rf"{usable + 1} exceeds the {usable} positions"):
        model(input_ids=torch.full((1, usable + 1), 5))


@pytest.mark.parametrize("arch", TABLES)
def test_position_ids_beyond_the_table_are_rejected(arch):
    model = build(arch, "base", max_position_embeddings=34).eval()
    ids = torch.full((1, 4), 5)
    for bad in (34, 1000, -1):
        with pytest.raises(ValueError, match=rf"`position_ids` contains {bad}, outside the position table \[0, 34\)"):
            model(input_ids=ids, position_ids=torch.tensor([[0, 1, 2, bad]]))


# -- torch.compile(fullgraph=True) -------------------------------------------------------------------
@pytest.mark.slow  # one compilation per architecture and mask kind (tens of seconds on CPU)
# (BERT: test_heads_hardening.py)
# (ModernBERT always unpads: the number of real tokens sizes its tensors, so it compiles with a graph break
# there, not with fullgraph=True; see README)
@pytest.mark.parametrize("arch", ["albert", "bart", "distilbert", "gpt", "roberta", "t5", "xlnet"])
def test_fullgraph_compile_with_and_without_a_mask(arch):
    # The heads' shared `forward` is one code object: start from a clean cache so the compilations of the
    # other architectures (and tests) do not count against dynamo's recompile limit.
    torch._dynamo.reset()
    model = build(arch, "sequence-classification").eval()
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    inputs = batch(model, "sequence-classification")
    mask = torch.ones_like(inputs["input_ids"])
    mask[1, 3:5] = 0  # padding inside the row: the mask matters, and the sequence still ends with <eos>
    with torch.no_grad():
        for kwargs in ({}, {"attention_mask": mask}):
            assert_close(compiled(**inputs, **kwargs).logits, model(**inputs, **kwargs).logits)
        # Value checks stay on as asynchronous asserts (see input_checks): a bad id still stops the forward.
        # Inductor may reach its own bounds check of the embedding lookup first (T5); either message names it.
        bad = dict(inputs, input_ids=inputs["input_ids"].clone())
        bad["input_ids"][0, 2] = model.config.vocab_size
        with pytest.raises(RuntimeError, match="outside the vocabulary|index out of bounds"):
            compiled(**bad, attention_mask=mask)
        # So is the 0/1 check of the attention mask (Hardening 2, point 11).
        with pytest.raises(RuntimeError, match="`attention_mask` has values other than 0 and 1"):
            compiled(**inputs, attention_mask=mask * 2)
        if arch == "t5":  # sequence classification reads the last <eos>: a row without one is an error
            no_eos = inputs["input_ids"].masked_fill(inputs["input_ids"] == model.config.eos_token_id, 5)
            with pytest.raises(RuntimeError, match="Every row must contain the <eos> token"):
                compiled(input_ids=no_eos, attention_mask=mask)
    torch._dynamo.reset()


def test_eos_pooling_needs_an_eos_in_every_row():
    model = build("t5", "sequence-classification").eval()
    ids = batch(model, "sequence-classification")["input_ids"]
    ids[1, -1] = 5
    with pytest.raises(ValueError, match=r"Every row must contain the <eos> token \(id 1\)"):
        model(input_ids=ids)


@pytest.mark.slow  # one compilation of a training step (tens of seconds on CPU)
def test_fullgraph_compile_of_a_training_step_with_dropout():
    # Training mode: dropout (the CPU sampler steps aside when compiled) and the sparse MLM head.
    torch._dynamo.reset()
    config = get_architecture("bert").config_class.from_preset("tiny", num_hidden_layers=1, sparse_prediction=True,
                                                                hidden_dropout_prob=0.1,
                                                                attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    model = get_architecture("bert").model_class("masked-lm")(config).train()
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    inputs = batch(model, "masked-lm")
    labels = torch.full_like(inputs["input_ids"], -100)
    labels[:, 2:4] = inputs["input_ids"][:, 2:4]
    out = compiled(**inputs, attention_mask=torch.ones_like(labels), labels=labels)
    assert out.logits.shape == (4, config.vocab_size) and torch.isfinite(out.loss)
    out.loss.backward()
    assert model.model.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    torch._dynamo.reset()


@pytest.mark.slow  # one compilation (tens of seconds on CPU)
def test_compiled_xlnet_takes_general_target_mappings_exactly():
    # Compiled, the mapping's values cannot be inspected: the one-hot shortcut must not be assumed.
    torch._dynamo.reset()
    model = build("xlnet", "causal-lm", initializer_range=0.5).eval()  # large weights: mappings matter
    ids = batch(model, "causal-lm")["input_ids"]
    perm = torch.zeros(2, 8, 8)
    perm[:, :, -2:] = 1  # nobody sees the last two tokens
    general = torch.zeros(2, 2, 8)
    general[:, 0, -2:] = 0.5  # slot 0 averages positions 6 and 7: not one-hot
    general[:, 1, -1] = 1
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    with torch.no_grad():
        eager = model(input_ids=ids, perm_mask=perm, target_mapping=general).logits
        shortcut = model(input_ids=ids, perm_mask=perm, target_mapping=torch.nn.functional.one_hot(
            general.argmax(-1), 8).float()).logits
        assert (eager - shortcut).abs().max() > 1e-3  # the test can tell the two paths apart
        assert_close(compiled(input_ids=ids, perm_mask=perm, target_mapping=general).logits, eager,
                     atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()


@pytest.mark.slow  # one compilation (tens of seconds on CPU)
def test_compiled_xlnet_checks_segment_ids_and_target_positions():
    # Compiled, XLNet's one-hot segment table has 3 columns (A, B, <cls>): a larger id is stopped by the
    # shared asynchronous value check, with advice, rather than by one_hot's bare "Class values must be ...".
    torch._dynamo.reset()
    model = build("xlnet", "base").eval()
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    ids = batch(model, "base")["input_ids"]
    types = torch.zeros_like(ids)
    types[:, 4:] = 2
    with torch.no_grad():
        assert_close(compiled(input_ids=ids, token_type_ids=types).last_hidden_state,
                     model(input_ids=ids, token_type_ids=types).last_hidden_state)
        types[1, 5] = 3
        with pytest.raises(RuntimeError, match="`token_type_ids` has values outside the compiled segment ids"):
            compiled(input_ids=ids, token_type_ids=types)
        # Target positions are range-checked compiled too (they index the sequence).
        targets = torch.tensor([[7, -1], [6, 7]])
        assert_close(compiled(input_ids=ids, target_positions=targets).last_hidden_state,
                     model(input_ids=ids, target_positions=targets).last_hidden_state)
        with pytest.raises(RuntimeError, match=r"`target_positions` has values outside the positions \[-1, 8\)"):
            compiled(input_ids=ids, target_positions=torch.tensor([[7, -1], [6, 8]]))
    torch._dynamo.reset()
