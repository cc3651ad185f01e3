"""BART model behaviour: config validation and presets, Auto registration, save/load, chunked loss == full
loss (final_logits_bias included), gradient checkpointing and eager == sdpa, attention dropout through the
fused kernel, resize_token_embeddings, and the errors for bad inputs."""

import pytest
import torch
from torch.testing import assert_close
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from hf_xfmr.models.bart import (
    XfmrBartConfig,
    XfmrBartForCausalLM,
    XfmrBartForConditionalGeneration,
    XfmrBartForSequenceClassification,
    XfmrBartModel,
)

from ._bart import padded_batch, padded_labels
from ._seq2seq import assert_checkpointing_and_eager_keep_the_step, assert_dropout_only_in_training


def tiny(**overrides):
    return XfmrBartConfig.from_preset("tiny", **{"vocab_size": 99, **overrides})


@pytest.mark.parametrize("name", ["tiny", "base", "large"])
def test_presets(name):
    config = XfmrBartConfig.from_preset(name)
    assert config.hidden_size == config.d_model and config.num_attention_heads == config.encoder_attention_heads
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id, config.decoder_start_token_id) == (1, 0, 2, 2)
    if name == "base":
        assert (config.d_model, config.encoder_layers, config.decoder_layers, config.encoder_ffn_dim) == (768, 6, 6, 3072)
    if name == "large":
        assert (config.d_model, config.encoder_layers, config.encoder_attention_heads) == (1024, 12, 16)


@pytest.mark.parametrize("kwargs,message", [
    (dict(d_model=0), "d_model"),
    (dict(d_model=30), "encoder_attention_heads"),
    (dict(decoder_attention_heads=3), "decoder_attention_heads"),
    (dict(activation_function="tanh"), "activation_function"),
    (dict(dropout=1.5), "dropout"),
    (dict(attention_dropout=-0.1), "attention_dropout"),
    (dict(encoder_layerdrop=1.0), "encoder_layerdrop"),
    (dict(max_position_embeddings=0), "max_position_embeddings"),
    (dict(eos_token_id=5000), "eos_token_id"),
    (dict(eos_token_id=[1, 2]), "eos_token_id"),
    (dict(decoder_start_token_id=-1), "decoder_start_token_id"),
])
def test_config_errors_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny(**kwargs)


def test_auto_classes_and_save_load(tmp_path):
    config = tiny()
    assert type(AutoConfig.for_model("xfmr-bart")) is XfmrBartConfig
    assert type(AutoModel.from_config(config)) is XfmrBartModel
    assert type(AutoModelForCausalLM.from_config(config)) is XfmrBartForCausalLM
    assert config.is_encoder_decoder  # the causal LM changed its own copy only
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    assert type(model) is XfmrBartForConditionalGeneration
    assert model.lm_head.weight is model.model.shared.weight
    model.final_logits_bias.normal_()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.final_logits_bias, model.final_logits_bias)
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    assert_close(loaded(input_ids=ids, attention_mask=mask, labels=labels).logits,
                 model(input_ids=ids, attention_mask=mask, labels=labels).logits)


def test_chunked_training_loss_equals_the_full_loss_and_the_bias_gets_no_gradient():
    model = XfmrBartForConditionalGeneration(tiny(dropout=0.0))
    model.final_logits_bias.normal_()
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    model.eval()
    full = model(input_ids=ids, attention_mask=mask, labels=labels)
    model.train()
    chunked = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert chunked.logits is None and full.logits.shape == (3, 8, 99)
    assert_close(chunked.loss, full.loss, atol=1e-6, rtol=1e-6)
    chunked.loss.backward()
    assert not model.final_logits_bias.requires_grad
    count = int((labels != -100).sum())
    halved = model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=2 * count)
    assert_close(halved.loss, full.loss / 2, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("attention_dropout", [0.0, 0.2])
def test_gradient_checkpointing_and_eager_equal_the_default(attention_dropout):
    """With attention dropout the CPU training path is the fused-dropout kernel in both sdpa and eager."""
    torch.manual_seed(0)
    model = XfmrBartForConditionalGeneration(tiny(dropout=0.1, attention_dropout=attention_dropout,
                                                  activation_dropout=0.1)).train()
    ids, mask = padded_batch()
    labels, decoder_mask = padded_labels()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, decoder_attention_mask=decoder_mask)
    assert_checkpointing_and_eager_keep_the_step(model, inputs, seed=3)


def test_dropout_is_active_in_training_only():
    model = XfmrBartForConditionalGeneration(tiny(dropout=0.3))
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    assert_dropout_only_in_training(model, dict(input_ids=ids, attention_mask=mask, labels=labels))


def test_output_attentions_and_hidden_states():
    model = XfmrBartForConditionalGeneration(tiny()).eval()
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    out = model(input_ids=ids, attention_mask=mask, labels=labels, output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_attentions) == 2 and out.encoder_attentions[0].shape == (3, 4, 11, 11)
    assert out.decoder_attentions[0].shape == (3, 4, 8, 8) and out.cross_attentions[0].shape == (3, 4, 8, 11)
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 3
    assert_close(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    assert out.decoder_attentions[0].triu(1).abs().max() == 0
    assert out.cross_attentions[0][1, :, :, 7:].abs().max() == 0


def test_resize_token_embeddings_resizes_the_logits_bias():
    model = XfmrBartForConditionalGeneration(tiny())
    model.final_logits_bias.normal_()
    old = model.final_logits_bias.clone()
    model.resize_token_embeddings(120)
    assert model.final_logits_bias.shape == (1, 120) and torch.equal(model.final_logits_bias[:, :99], old)
    assert (model.final_logits_bias[:, 99:] == 0).all()
    ids, mask = padded_batch()
    assert model.eval()(input_ids=ids, attention_mask=mask).logits.shape == (3, 11, 120)


def test_bad_inputs_fail_clearly():
    model = XfmrBartForConditionalGeneration(tiny()).eval()
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    with pytest.raises(ValueError, match="decoder_input_ids.*labels"):
        model(input_ids=ids, labels=labels, decoder_input_ids=labels[:, :5].clamp(min=0))
    with pytest.raises(ValueError, match="attention_mask"):
        model(input_ids=ids, attention_mask=mask[:, :5], labels=labels)
    with pytest.raises(ValueError, match="decoder_attention_mask"):
        model(input_ids=ids, labels=labels, decoder_attention_mask=mask)
    with pytest.raises(ValueError, match="input_ids"):
        model(input_ids=ids + 500, labels=labels)
    with pytest.raises(ValueError, match="128 positions.*truncat"):
        model(input_ids=torch.full((1, 200), 5))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=ids, decoder_input_ids=torch.full((3, 200), 5))
    model.config.decoder_start_token_id = None
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        model(input_ids=ids, labels=labels)


def test_sequence_classification_reads_the_last_eos_and_needs_one():
    model = XfmrBartForSequenceClassification(tiny(num_labels=3)).eval()
    ids, mask = padded_batch()
    assert model(input_ids=ids, attention_mask=mask).logits.shape == (3, 3)
    ids[0, ids[0] == 2] = 7
    with pytest.raises(ValueError, match="eos"):
        model(input_ids=ids, attention_mask=mask)
