"""Unpadding by default in GPT (right-padded batches) and in the encoders of T5 and BART.

`config.unpad_inputs` (on by default, saved with the config) decides, once per forward, whether a batch runs
on its real tokens only (`layers.padding.encoder_padding`): GPT on a right-padded batch without a cache passed
in, the T5 / BART encoders on a right-padded batch (their decoders keep the padded layout). These tests pin
which batches unpad, what padding positions hold, GPT's cache, that every path calls the same modules in the
same order (ZeRO-3 gathers parameters in module hooks: a data-dependent module sequence hangs the processes)
and that the one-masked-call layout (GPUs) equals the per-sequence one. Parity with transformers on padded
batches, both ways, is in test_gpt_parity.py, test_t5_parity.py and test_bart_parity.py.
"""

import functools
import importlib

import pytest
import torch
from torch.testing import assert_close
from transformers import DynamicCache

import hf_xfmr  # noqa: F401  (registers every architecture)
from hf_xfmr.layers.padding import VarlenBatch, encoder_padding
from hf_xfmr.models.registry import get_architecture

from ._parity import module_sequence

ARCHS = ["gpt", "t5", "bart"]
ENCODER_DECODERS = ["t5", "bart"]


def tiny(arch, task, **overrides):
    torch.manual_seed(0)
    spec = get_architecture(arch)
    config = spec.config_class.from_preset("tiny", num_labels=2, **overrides)
    return spec.model_class(task)(config)


def right_padded(model, lengths=(10, 6, 3), seq_len=10):
    """(ids, mask): random ids, each row ending in the model's <eos> (T5 / BART classifiers pool there)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 90, (len(lengths), seq_len), generator=g)
    mask = (torch.arange(seq_len)[None] < torch.tensor(lengths)[:, None]).long()
    ids[torch.arange(len(lengths)), mask.sum(1) - 1] = model.config.eos_token_id
    return ids.masked_fill(mask == 0, model.config.pad_token_id or 0), mask


def ran_unpadded(model, monkeypatch, **inputs):
    """(output, whether the forward ran on the real tokens only: it re-pads with `VarlenBatch.pad`)."""
    calls = []
    original = VarlenBatch.pad
    monkeypatch.setattr(VarlenBatch, "pad", lambda self, x: calls.append(x.shape) or original(self, x))
    try:
        return model(**inputs), bool(calls)
    finally:
        monkeypatch.setattr(VarlenBatch, "pad", original)


def base_inputs(arch, ids, mask, **extra):
    """What the base model takes: T5's needs decoder inputs (BART's reads the input shifted right)."""
    decoder = dict(decoder_input_ids=torch.randint(5, 90, (ids.shape[0], 4))) if arch == "t5" else {}
    return dict(input_ids=ids, attention_mask=mask, **decoder, **extra)


def encoder_states(out):
    """The (B, T, C) states unpadding changes: GPT's last hidden state, the T5 / BART encoder's."""
    return out.encoder_last_hidden_state if hasattr(out, "encoder_last_hidden_state") else out.last_hidden_state


# -- the config field ----------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_unpad_inputs_is_on_by_default_saved_and_settable_through_from_pretrained(arch, tmp_path):
    model = tiny(arch, "base")
    assert model.config.unpad_inputs is True
    model.save_pretrained(tmp_path)
    off = type(model).from_pretrained(tmp_path, unpad_inputs=False)
    assert off.config.unpad_inputs is False
    off.save_pretrained(tmp_path / "off")
    assert type(model).from_pretrained(tmp_path / "off").config.unpad_inputs is False


# -- the decision --------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_right_padding_unpads_and_left_padding_no_padding_attention_weights_and_the_switch_do_not(arch, monkeypatch):
    model = tiny(arch, "base").eval()
    ids, mask = right_padded(model)
    keep = mask.bool()
    torch.manual_seed(0)
    with torch.no_grad():
        unpadded, ran = ran_unpadded(model, monkeypatch, **base_inputs(arch, ids, mask))
        assert ran and not encoder_states(unpadded)[~keep].any()  # zeros at padding
        full = encoder_states(model(**base_inputs(arch, ids, torch.ones_like(mask))))
        _, ran = ran_unpadded(model, monkeypatch, **base_inputs(arch, ids, torch.ones_like(mask)))
        assert not ran  # no padding: the padded layout without a mask
        assert_close(encoder_states(unpadded)[0], full[0], atol=1e-5, rtol=0)  # the full row, either way
        padded_runs = {"left padding": base_inputs(arch, ids.flip(1), mask.flip(1)),
                       "attention weights": base_inputs(arch, ids, mask, output_attentions=True)}
        for what, inputs in padded_runs.items():
            out, ran = ran_unpadded(model, monkeypatch, **inputs)
            assert not ran and encoder_states(out)[~inputs["attention_mask"].bool()].abs().sum() > 0, what
        model.config.unpad_inputs = False
        torch.manual_seed(0)
        padded, ran = ran_unpadded(model, monkeypatch, **base_inputs(arch, ids, mask))
        assert not ran
    assert_close(encoder_states(unpadded)[keep], encoder_states(padded)[keep], atol=1e-5, rtol=0)
    if arch in ENCODER_DECODERS:  # the decoder's outputs: the padded path's at every position
        assert_close(unpadded.last_hidden_state, padded.last_hidden_state, atol=1e-5, rtol=0)


def test_prefix_only_keeps_rows_with_padding_before_a_real_token_padded():
    inside = torch.tensor([[1, 1, 0, 1], [1, 1, 0, 0]])  # padding inside row 0
    varlen, mask = encoder_padding(inside, unpad=True)
    assert varlen.bounds == [0, 3, 5] and mask is None  # absolute positions (BART, GPT): it may be packed
    varlen, mask = encoder_padding(inside, unpad=True, prefix_only=True)
    assert varlen is None and torch.equal(mask[:, 0, 0], inside.bool())
    varlen, _ = encoder_padding(inside[1:], unpad=True, prefix_only=True)  # right padding alone: unpadded
    assert varlen.bounds == [0, 2]


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_inside_a_row_unpads_with_absolute_positions_but_not_t5s_relative_ones(arch, monkeypatch):
    """Packing a row with padding inside brings its real tokens closer together: BART and GPT keep each token's
    position (gathered from the padded layout, or counted over the real tokens as the padded path does), while
    T5's relative bias would see shorter distances, so T5 runs such a batch padded."""
    model = tiny(arch, "base").eval()
    ids, mask = right_padded(model)
    mask[0, 3:5] = 0
    keep = mask.bool()
    inputs = base_inputs(arch, ids, mask)
    with torch.no_grad():
        out, ran = ran_unpadded(model, monkeypatch, **inputs)
        model.config.unpad_inputs = False
        padded = model(**inputs)
    assert ran == (arch != "t5")
    assert_close(encoder_states(out)[keep], encoder_states(padded)[keep], atol=1e-5, rtol=0)


def test_gpt_keeps_the_padded_path_with_a_cache_passed_or_a_4d_mask(monkeypatch):
    model = tiny("gpt", "base").eval()
    ids, mask = right_padded(model)
    causal = torch.tril(torch.ones(10, 10, dtype=torch.bool))
    four_d = (causal & mask.bool()[:, None, :])[:, None]  # (B, 1, T, T), True = attend
    with torch.no_grad():
        for what, extra in {"a cache": dict(attention_mask=mask, past_key_values=DynamicCache()),
                            "a 4-D mask": dict(attention_mask=four_d)}.items():
            _, ran = ran_unpadded(model, monkeypatch, input_ids=ids, **extra)
            assert not ran, what


def test_gpt_runs_packed_documents_unpadded_one_causal_sequence_each(monkeypatch):
    """Restarting positions (two documents per row) unpad too: each document is its own varlen sequence, and
    its outputs equal the padded path's block-diagonal causal mask."""
    model = tiny("gpt", "base").eval()
    ids, mask = right_padded(model)
    packed = torch.arange(10).remainder(5)[None].expand(3, 10)  # two documents per row
    keep = mask.bool()
    with torch.no_grad():
        out, ran = ran_unpadded(model, monkeypatch, input_ids=ids, attention_mask=mask, position_ids=packed)
        model.config.unpad_inputs = False
        padded = model(input_ids=ids, attention_mask=mask, position_ids=packed)
    assert ran
    assert_close(out.last_hidden_state[keep], padded.last_hidden_state[keep], atol=1e-5, rtol=0)


@pytest.mark.parametrize("lengths", [(6, 6, 6), (10, 6, 3), (3, 10, 1)], ids=["equal", "decreasing", "mixed"])
@pytest.mark.parametrize("arch", ARCHS)
def test_unpadded_equals_padded_at_real_positions_for_equal_and_different_lengths(arch, lengths):
    """Equal lengths take one batched kernel call (T5: the bias's (L, L) corner for all), different ones a call
    per sequence (each with its own corner)."""
    model = tiny(arch, "base").eval()
    ids, mask = right_padded(model, lengths)
    keep = mask.bool()
    inputs = base_inputs(arch, ids, mask, output_hidden_states=True)
    with torch.no_grad():
        unpadded = model(**inputs)
        model.config.unpad_inputs = False
        padded = model(**inputs)
    states = "hidden_states" if arch == "gpt" else "encoder_hidden_states"
    for ours, reference in zip(getattr(unpadded, states), getattr(padded, states), strict=True):
        assert_close(ours[keep], reference[keep], atol=1e-5, rtol=0)
        assert not ours[~keep].any()
    assert_close(encoder_states(unpadded)[keep], encoder_states(padded)[keep], atol=1e-5, rtol=0)


# -- what runs -----------------------------------------------------------------------------------------
CASES = [("gpt", "causal-lm"), ("gpt", "sequence-classification"), ("gpt", "question-answering"),
         ("t5", "seq2seq-lm"), ("t5", "token-classification"), ("t5", "sequence-classification"),
         ("bart", "seq2seq-lm"), ("bart", "question-answering")]


@pytest.mark.parametrize("arch,task", CASES)
def test_every_path_calls_the_same_modules_in_the_same_order(arch, task):
    model = tiny(arch, task).train()
    ids, mask = right_padded(model)
    targets = {"causal-lm": dict(labels=ids.masked_fill(mask == 0, -100)),
               "seq2seq-lm": dict(labels=torch.randint(5, 90, (3, 4))),
               "sequence-classification": dict(labels=torch.tensor([0, 1, 1])),
               "token-classification": dict(labels=torch.randint(0, 2, ids.shape).masked_fill(mask == 0, -100)),
               "question-answering": dict(start_positions=torch.tensor([0, 1, 2]),
                                          end_positions=torch.tensor([3, 4, 2]))}[task]
    unpadded = module_sequence(model, input_ids=ids, attention_mask=mask, **targets)
    for inputs in (dict(input_ids=ids, attention_mask=torch.ones_like(mask)),  # no padding
                   dict(input_ids=ids.flip(1), attention_mask=mask.flip(1))):  # left padding: the padded path
        assert module_sequence(model, **inputs, **targets) == unpadded
    model.config.unpad_inputs = False
    assert module_sequence(model, input_ids=ids, attention_mask=mask, **targets) == unpadded


# -- what padding positions hold -----------------------------------------------------------------------
def test_gpt_padding_positions_hold_the_heads_of_a_zero_vector_and_qa_masks_them():
    lm = tiny("gpt", "causal-lm").eval()
    ids, mask = right_padded(lm)
    keep = mask.bool()
    with torch.no_grad():
        assert not lm(input_ids=ids, attention_mask=mask).logits[~keep].any()  # lm_head has no bias
        tagger = tiny("gpt", "token-classification").eval()
        logits = tagger(input_ids=ids, attention_mask=mask).logits
        assert_close(logits[~keep], tagger.classifier.bias.expand(int((~keep).sum()), -1), atol=1e-6, rtol=0)
        qa = tiny("gpt", "question-answering").eval()
        start = qa(input_ids=ids, attention_mask=mask).start_logits
        assert (start[~keep] == torch.finfo(start.dtype).min).all() and (start[keep] > -1e4).all()
        qa.config.unpad_inputs = False  # the reference's behaviour: padding positions are scored as well
        assert (qa(input_ids=ids, attention_mask=mask).start_logits[~keep] > -1e4).all()


@pytest.mark.parametrize("arch", ENCODER_DECODERS)
def test_seq2seq_decoder_outputs_are_the_padded_paths_at_every_position(arch):
    """The decoder reads the encoder's zeros at padding only through a cross-attention mask that hides them:
    the QA head (a decoder head) keeps the reference's logits everywhere, padding unmasked."""
    qa = tiny(arch, "question-answering").eval()
    ids, mask = right_padded(qa)
    spans = dict(start_positions=torch.tensor([0, 1, 2]), end_positions=torch.tensor([3, 4, 2]))
    with torch.no_grad():
        unpadded = qa(input_ids=ids, attention_mask=mask, **spans)
        qa.config.unpad_inputs = False
        padded = qa(input_ids=ids, attention_mask=mask, **spans)
    assert not unpadded.encoder_last_hidden_state[~mask.bool()].any()
    for name in ("start_logits", "end_logits", "loss"):
        assert_close(getattr(unpadded, name), getattr(padded, name), atol=1e-5, rtol=0)


def test_t5_token_classification_holds_the_classifier_bias_at_padding():
    tagger = tiny("t5", "token-classification").eval()
    ids, mask = right_padded(tagger)
    keep = mask.bool()
    with torch.no_grad():
        logits = tagger(input_ids=ids, attention_mask=mask).logits
    assert_close(logits[~keep], tagger.classifier.bias.expand(int((~keep).sum()), -1), atol=1e-6, rtol=0)


# -- GPT's cache and generation ------------------------------------------------------------------------
def test_gpt_cache_built_on_the_unpadded_path_continues_as_the_padded_one():
    """In eval mode a forward builds a cache (`use_cache`): unpadded, it holds the padded path's keys and values
    at real positions and zeros at padding, and decoding goes on from it to the same logits."""
    model = tiny("gpt", "causal-lm").eval()
    ids, mask = right_padded(model)
    keep = mask.bool()
    step_ids, step_mask = torch.tensor([[7], [8], [9]]), torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1)
    results = {}
    with torch.no_grad():
        for unpad in (True, False):
            model.config.unpad_inputs = unpad
            cache = model(input_ids=ids, attention_mask=mask).past_key_values
            layers = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]  # before the step
            step = model(input_ids=step_ids, attention_mask=step_mask, past_key_values=cache).logits
            results[unpad] = layers, step
    (layers, step), (padded_layers, padded_step) = results[True], results[False]
    for ours, reference in zip(layers, padded_layers, strict=True):
        for a, b in zip(ours, reference):
            assert a.shape == b.shape == (3, 4, 10, 8)
            assert_close(a.transpose(1, 2)[keep], b.transpose(1, 2)[keep], atol=1e-5, rtol=0)
            assert not a.transpose(1, 2)[~keep].any()
    assert_close(step, padded_step, atol=1e-5, rtol=0)


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_gpt_generation_keeps_the_padded_path(left, monkeypatch):
    model = tiny("gpt", "causal-lm").eval()
    ids, mask = right_padded(model)
    if left:
        ids, mask = ids.flip(1), mask.flip(1)
    calls = []
    original = VarlenBatch.pad
    monkeypatch.setattr(VarlenBatch, "pad", lambda self, x: calls.append(x.shape) or original(self, x))
    kwargs = dict(attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    generated = model.generate(ids, **kwargs)
    assert not calls  # generate passes its own cache: every step runs the padded layout
    model.config.unpad_inputs = False
    assert torch.equal(model.generate(ids, **kwargs), generated)


# -- the GPU layout, checked on CPU --------------------------------------------------------------------
@pytest.mark.parametrize("arch,task", [("gpt", "causal-lm"), ("t5", "seq2seq-lm"), ("bart", "seq2seq-lm")])
def test_one_masked_attention_call_per_layer_equals_one_call_per_sequence(arch, task, monkeypatch):
    """Off the CPU, attention over the real tokens runs as one masked call over the sequences padded to the
    longest (`VarlenBatch.dense_index`; GPT adds the causal mask, T5 the bias's corner with the padding hidden);
    forced here on CPU, it must give the same outputs and gradients."""
    model = tiny(arch, task).eval()  # no dropout: both runs see the same network
    ids, mask = right_padded(model)
    labels = ids.masked_fill(mask == 0, -100) if task == "causal-lm" else torch.randint(5, 90, (3, 4))
    model.config.chunked_lm_loss = False
    per_sequence = model(input_ids=ids, attention_mask=mask, labels=labels)
    per_sequence.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    modeling = importlib.import_module(type(model).__module__)
    monkeypatch.setattr(modeling, "encoder_padding", functools.partial(encoder_padding, dense=True))
    varlen, _ = modeling.encoder_padding(mask, unpad=True)
    assert varlen.dense_mask.shape == (3, 1, 1, 10)
    dense = model(input_ids=ids, attention_mask=mask, labels=labels)
    dense.loss.backward()
    keep = mask.bool()
    logits_keep = keep if task == "causal-lm" else slice(None)  # seq2seq: the decoder's logits, all positions
    assert_close(dense.logits[logits_keep], per_sequence.logits[logits_keep], atol=1e-5, rtol=0)
    assert_close(dense.loss, per_sequence.loss, atol=1e-6, rtol=0)
    assert grads
    for name, p in model.named_parameters():
        if name in grads:
            assert_close(p.grad, grads[name], atol=1e-5, rtol=1e-4, msg=lambda m: f"grad {name}: {m}")
