"""Unpadding by default in the BERT family (BERT, RoBERTa, ALBERT, DistilBERT) and ModernBERT's defaults.

`config.unpad_inputs` (on by default, saved with the config) decides, once per forward, between the real
tokens only and the padded layout (`layers.padding.encoder_padding`); these tests pin that decision, what
padding positions hold, and that every path calls the same modules in the same order (ZeRO-3 gathers
parameters in module hooks: a data-dependent module sequence hangs the processes). Parity with transformers
on padded batches, both ways, is in the test_*_parity.py files.
"""

import pytest
import torch
import transformers
from torch.testing import assert_close

import hf_xfmr
from hf_xfmr.layers.padding import VarlenBatch, encoder_padding
from hf_xfmr.models.registry import get_architecture

from ._parity import module_sequence

BERT_FAMILY = ["bert", "roberta", "albert", "distilbert"]


def tiny(arch, task, **overrides):
    torch.manual_seed(0)
    spec = get_architecture(arch)
    config = spec.config_class.from_preset("tiny", num_labels=2, **overrides)
    return spec.model_class(task)(config)


def right_padded(batch=3, seq_len=10, lengths=(10, 6, 3), low=5):
    ids = torch.randint(low, 90, (batch, seq_len))
    mask = (torch.arange(seq_len)[None] < torch.tensor(lengths)[:, None]).long()
    return ids, mask


# -- the decision --------------------------------------------------------------------------------------
def test_encoder_padding_picks_the_layout_from_the_mask():
    right = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 0]])  # padding at the end or inside a row
    varlen, mask = encoder_padding(right, unpad=True)
    assert mask is None and varlen.indices.tolist() == [0, 1, 2, 3, 4, 5, 8, 10]
    assert varlen.bounds == [0, 4, 6, 8] and varlen.shape == (3, 4) and varlen.max_seqlen == 4
    assert encoder_padding(None, unpad=True) == (None, None)
    assert encoder_padding(torch.ones(2, 5, dtype=torch.long), unpad=True) == (None, None)  # no padding: no mask
    for attention_mask, unpad in ((right, False), (torch.tensor([[0, 1, 1], [1, 1, 1]]), True),
                                  (torch.tensor([[1, 1, 1], [0, 0, 0]]), True)):
        varlen, mask = encoder_padding(attention_mask, unpad=unpad)  # off, left padding, an empty row: padded
        assert varlen is None and mask.shape == (attention_mask.shape[0], 1, 1, attention_mask.shape[1])
        assert torch.equal(mask[:, 0, 0], attention_mask.bool())


def test_varlen_batch_unpads_broadcast_inputs_and_pads_back_with_zeros():
    varlen, _ = encoder_padding(torch.tensor([[1, 1, 1], [1, 0, 0]]), unpad=True)
    assert isinstance(varlen, VarlenBatch)
    positions = torch.arange(3)[None]  # (1, T): the same for every row
    assert varlen.unpad(positions).tolist() == [0, 1, 2, 0]
    x = torch.arange(4.0)[:, None].expand(4, 2)  # (N, 2)
    ids, none = varlen.unpad_inputs(torch.tensor([[7, 8, 9], [5, 0, 0]]), None)
    assert ids.tolist() == [[7, 8, 9, 5]] and none is None
    assert varlen.pad(x).tolist() == [[[0, 0], [1, 1], [2, 2]], [[3, 3], [0, 0], [0, 0]]]


# -- the config field ----------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", [*BERT_FAMILY, "modernbert"])
def test_unpad_inputs_is_on_by_default_saved_and_settable_through_from_pretrained(arch, tmp_path):
    model = tiny(arch, "base")
    assert model.config.unpad_inputs is True
    model.save_pretrained(tmp_path)
    off = type(model).from_pretrained(tmp_path, unpad_inputs=False)
    assert off.config.unpad_inputs is False
    off.save_pretrained(tmp_path / "off")
    assert type(model).from_pretrained(tmp_path / "off").config.unpad_inputs is False
    if arch in ("bert", "roberta", "modernbert"):  # the former instance attribute is the field's alias
        assert off.use_unpadding is False
        off.use_unpadding = True
        assert off.config.unpad_inputs is True


def test_modernbert_chunked_lm_loss_is_on_by_default_and_after_conversion():
    config = transformers.ModernBertConfig(
        vocab_size=99, hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
        local_attention=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        cls_token_id=1, sep_token_id=2)
    ours = hf_xfmr.from_transformers(transformers.ModernBertForMaskedLM(config)).train()
    assert ours.config.chunked_lm_loss and ours.config.unpad_inputs
    ids, mask = right_padded(lengths=(10, 7, 4))
    labels = torch.where(mask.bool(), ids, -100)
    out = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert out.logits is None and torch.isfinite(out.loss)  # no (N, V) logits in training
    ours.config.chunked_lm_loss = False  # the switch back: logits in training
    dense = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert dense.logits.shape == (3, 10, 99)
    assert_close(dense.loss, out.loss, atol=1e-5, rtol=1e-5)


# -- what runs -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["masked-lm", "sequence-classification", "question-answering"])
@pytest.mark.parametrize("arch", BERT_FAMILY)
def test_every_path_calls_the_same_modules_in_the_same_order(arch, task):
    model = tiny(arch, task, sparse_prediction=True) if task == "masked-lm" else tiny(arch, task)
    model.train()
    ids, mask = right_padded()
    left = mask.flip(1)
    labels = {"masked-lm": dict(labels=torch.where(mask.bool(), ids, -100)),
              "sequence-classification": dict(labels=torch.tensor([0, 1, 1])),
              "question-answering": dict(start_positions=torch.tensor([0, 1, 2]),
                                         end_positions=torch.tensor([3, 4, 2]))}[task]
    unpadded = module_sequence(model, input_ids=ids, attention_mask=mask, **labels)
    assert "model.pooler" not in unpadded or unpadded.count("model.pooler") == 1
    for attention_mask in (torch.ones_like(mask), left):  # no padding; left padding (the padded path)
        assert module_sequence(model, input_ids=ids, attention_mask=attention_mask, **labels) == unpadded
    model.config.unpad_inputs = False
    assert module_sequence(model, input_ids=ids, attention_mask=mask, **labels) == unpadded


@pytest.mark.parametrize("arch", BERT_FAMILY)
def test_no_padding_takes_the_padded_layout_without_gathers_and_padding_the_unpadded_one(arch, monkeypatch):
    model = tiny(arch, "base").eval()
    ids, mask = right_padded()
    gathers = []
    original = VarlenBatch.unpad
    monkeypatch.setattr(VarlenBatch, "unpad", lambda self, x: gathers.append(x.shape) or original(self, x))
    full = model(input_ids=ids, attention_mask=torch.ones_like(mask)).last_hidden_state
    assert not gathers  # a batch without padding: no index gathers at all
    assert_close(full, model(input_ids=ids).last_hidden_state, atol=1e-6, rtol=0)
    padded = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert gathers  # padding: the embeddings' inputs are gathered once
    keep = mask.bool()
    assert not padded[~keep].any()
    assert_close(padded[0], full[0], atol=1e-5, rtol=0)  # the unpadded row is the same either way
    with_weights = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert with_weights.attentions[0].shape[-2:] == (10, 10)  # attention weights: the padded path
    assert with_weights.last_hidden_state[~keep].abs().sum() > 0  # the reference's values at padding
    assert_close(with_weights.last_hidden_state[keep], padded[keep], atol=1e-5, rtol=0)


def test_left_padding_runs_padded_so_cls_pooling_matches_the_reference():
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=64, num_labels=3)
    ref = transformers.BertForSequenceClassification._from_config(config, attn_implementation="sdpa").eval()
    ours = hf_xfmr.from_transformers(ref).eval()
    ids, mask = right_padded(lengths=(10, 6, 3))
    mask = mask.flip(1)  # left padding: position 0 of rows 1 and 2 is padding, and the pooler reads it
    a = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    b = ours(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    assert_close(b.hidden_states[-1], a.hidden_states[-1], atol=1e-5, rtol=1e-5)  # every position


@pytest.mark.parametrize("arch", BERT_FAMILY)
def test_a_row_without_real_tokens_still_runs(arch):
    model = tiny(arch, "sequence-classification").eval()
    ids, _ = right_padded(batch=2, lengths=(10, 3))
    mask = torch.tensor([[1] * 10, [0] * 10])
    both = model(input_ids=ids, attention_mask=mask).logits
    alone = model(input_ids=ids[:1], attention_mask=mask[:1]).logits
    assert torch.isfinite(both).all()
    assert_close(both[:1], alone, atol=1e-5, rtol=0)


# -- what padding positions hold -----------------------------------------------------------------------
@pytest.mark.parametrize("arch", BERT_FAMILY)
def test_padding_positions_hold_the_head_of_a_zero_vector_and_qa_masks_them(arch):
    ids, mask = right_padded()
    keep = mask.bool()
    tagger = tiny(arch, "token-classification").eval()
    logits = tagger(input_ids=ids, attention_mask=mask).logits
    zero_vector = tagger.classifier(torch.zeros(1, tagger.config.hidden_size))  # (1, num_labels): its bias
    assert_close(logits[~keep], zero_vector.expand(int((~keep).sum()), -1), atol=1e-6, rtol=0)

    qa = tiny(arch, "question-answering").eval()
    start = qa(input_ids=ids, attention_mask=mask).start_logits
    assert (start[~keep] == torch.finfo(start.dtype).min).all() and (start[keep] > -1e4).all()
    qa.config.unpad_inputs = False  # the reference's behaviour: padding positions are scored as well
    start = qa(input_ids=ids, attention_mask=mask).start_logits
    assert (start[~keep] > -1e4).all()


@pytest.mark.parametrize("arch", BERT_FAMILY)
def test_one_masked_attention_call_per_layer_equals_one_call_per_sequence(arch, monkeypatch):
    """Off the CPU, attention over the real tokens runs as one masked call over the sequences padded to the
    longest (`VarlenBatch.dense_index`); forced here on CPU, it must give the same outputs and gradients."""
    import functools
    import importlib

    model = tiny(arch, "token-classification").eval()  # no dropout: both runs see the same network
    ids, mask = right_padded()
    labels = torch.where(mask.bool(), ids % 2, -100)
    per_sequence = model(input_ids=ids, attention_mask=mask, labels=labels)
    per_sequence.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    modeling = importlib.import_module(type(model.model).run_encoder.__module__)  # models/encoder.py: the family's loop
    monkeypatch.setattr(modeling, "encoder_padding", functools.partial(encoder_padding, dense=True))
    varlen, _ = modeling.encoder_padding(mask, unpad=True)
    assert varlen.dense_mask.shape == (3, 1, 1, 10) and varlen.dense_index.tolist()[-3:] == [20, 21, 22]
    dense = model(input_ids=ids, attention_mask=mask, labels=labels)
    dense.loss.backward()
    keep = mask.bool()
    assert_close(dense.logits[keep], per_sequence.logits[keep], atol=1e-5, rtol=0)
    assert_close(dense.loss, per_sequence.loss, atol=1e-6, rtol=0)
    for name, p in model.named_parameters():
        assert_close(p.grad, grads[name], atol=1e-5, rtol=1e-4, msg=lambda m: f"grad {name}: {m}")
