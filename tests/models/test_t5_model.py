"""T5 model behaviour: config validation and presets, the relative position buckets, Auto registration,
save/load, tied vs untied heads, chunked loss == full loss, gradient checkpointing, sdpa == eager, and the
errors for bad inputs."""

import pytest
import torch
import transformers
from torch.testing import assert_close
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

import hf_xfmr
from hf_xfmr.layers.relative_t5 import relative_position_bucket
from hf_xfmr.models.seq2seq import shift_tokens_right
from hf_xfmr.models.t5 import (
    XfmrT5Config,
    XfmrT5EncoderModel,
    XfmrT5ForConditionalGeneration,
    XfmrT5ForSequenceClassification,
    XfmrT5Model,
)

from ._seq2seq import assert_checkpointing_and_eager_keep_the_step, assert_dropout_only_in_training
from ._t5 import padded_batch, padded_labels


def tiny(variant="tiny", **overrides):
    return XfmrT5Config.from_preset(variant, vocab_size=99, **overrides)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("buckets,distance", [(32, 128), (8, 20), (6, 7)])
def test_relative_buckets_equal_the_reference(bidirectional, buckets, distance):
    relative = torch.arange(-300, 301)[None, :] - torch.zeros(1, 1, dtype=torch.long)
    expected = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket(
        relative, bidirectional=bidirectional, num_buckets=buckets, max_distance=distance)
    got = relative_position_bucket(relative, bidirectional, buckets, distance)
    assert torch.equal(got, expected)
    assert got.min() >= 0 and got.max() < buckets
    if not bidirectional:  # every future key shares bucket 0 with distance 0
        assert (got[relative > 0] == 0).all()


@pytest.mark.parametrize("name", ["tiny", "tiny-v1.1", "small", "base", "v1.1-small", "v1.1-base"])
def test_presets(name):
    config = XfmrT5Config.from_preset(name)
    v11 = "v1.1" in name
    assert config.is_gated_act == v11 and config.tie_word_embeddings == (not v11)
    assert config.dense_act_fn == ("gelu_new" if v11 else "relu")
    assert config.decoder_start_token_id == config.pad_token_id == 0
    assert config.hidden_size == config.d_model and config.num_attention_heads == config.num_heads
    if name == "small":
        assert (config.d_model, config.d_ff, config.num_layers, config.num_heads) == (512, 2048, 6, 8)
    if name == "v1.1-base":
        assert (config.d_model, config.d_ff, config.num_layers, config.num_decoder_layers) == (768, 2048, 12, 12)


@pytest.mark.parametrize("kwargs,message", [
    (dict(d_model=0), "d_model"),
    (dict(feed_forward_proj="gated-gelu-x"), "feed_forward_proj"),
    (dict(feed_forward_proj="tanh"), "feed_forward_proj"),
    (dict(dropout_rate=1.5), "dropout_rate"),
    (dict(relative_attention_num_buckets=2), "relative_attention_num_buckets"),
    (dict(relative_attention_max_distance=4), "relative_attention_max_distance"),
    (dict(eos_token_id=5000), "eos_token_id"),
    (dict(eos_token_id=[1, 2]), "eos_token_id"),
    (dict(num_decoder_layers=0), "num_decoder_layers"),
    (dict(is_encoder_decoder=False), "is_encoder_decoder"),
])
def test_config_errors_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny(**kwargs)


def test_auto_classes_and_save_load(tmp_path):
    config = tiny()
    assert type(AutoConfig.for_model("xfmr-t5")) is XfmrT5Config
    assert type(AutoModel.from_config(config)) is XfmrT5Model
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    assert type(model) is XfmrT5ForConditionalGeneration
    assert model.lm_head.weight is model.model.shared.weight
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    assert_close(loaded(input_ids=ids, attention_mask=mask, labels=labels).logits,
                 model(input_ids=ids, attention_mask=mask, labels=labels).logits)


def test_untied_head_is_separate_and_unscaled(tmp_path):
    model = XfmrT5ForConditionalGeneration(tiny("tiny-v1.1")).eval()
    assert model.lm_head.weight is not model.model.shared.weight
    assert not torch.equal(model.lm_head.weight, model.model.shared.weight)
    assert model.decoder_output_scale() is None
    model.save_pretrained(tmp_path)
    loaded = XfmrT5ForConditionalGeneration.from_pretrained(tmp_path)
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    assert loaded.lm_head.weight is not loaded.model.shared.weight
    assert len(model.model.decoder.layers) == 3 and len(model.model.encoder.layers) == 2


@pytest.mark.parametrize("variant", ["tiny", "tiny-v1.1"])
def test_chunked_training_loss_equals_the_full_loss(variant):
    model = XfmrT5ForConditionalGeneration(tiny(variant, dropout_rate=0.0))
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    model.eval()
    full = model(input_ids=ids, attention_mask=mask, labels=labels)
    model.train()
    chunked = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert chunked.logits is None and full.logits.shape == (3, 8, 99)
    assert_close(chunked.loss, full.loss, atol=1e-6, rtol=1e-6)
    # num_items_in_batch (Trainer's gradient accumulation) divides the summed loss instead
    count = int((labels != -100).sum())
    halved = model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=2 * count)
    assert_close(halved.loss, full.loss / 2, atol=1e-6, rtol=1e-6)


def test_gradient_checkpointing_and_eager_equal_the_default():
    torch.manual_seed(0)
    model = XfmrT5ForConditionalGeneration(tiny("tiny-v1.1", dropout_rate=0.0)).train()
    ids, mask = padded_batch()
    labels, decoder_mask = padded_labels()
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, decoder_attention_mask=decoder_mask)
    assert_checkpointing_and_eager_keep_the_step(model, inputs)


def test_dropout_is_active_in_training_only():
    model = XfmrT5ForConditionalGeneration(tiny(dropout_rate=0.3))
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    assert_dropout_only_in_training(model, dict(input_ids=ids, attention_mask=mask, labels=labels))


def test_output_attentions_and_hidden_states():
    model = XfmrT5ForConditionalGeneration(tiny()).eval()
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    out = model(input_ids=ids, attention_mask=mask, labels=labels, output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_attentions) == 2 and out.encoder_attentions[0].shape == (3, 4, 11, 11)
    assert len(out.decoder_attentions) == 2 and out.decoder_attentions[0].shape == (3, 4, 8, 8)
    assert out.cross_attentions[0].shape == (3, 4, 8, 11)
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 3
    assert_close(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    # a causal decoder: no weight on future positions; padded encoder keys get none either
    assert out.decoder_attentions[0].triu(1).abs().max() == 0
    assert out.cross_attentions[0][1, :, :, 7:].abs().max() == 0


def test_bad_inputs_fail_clearly():
    model = XfmrT5ForConditionalGeneration(tiny()).eval()
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    with pytest.raises(ValueError, match="decoder_input_ids.*labels"):
        model(input_ids=ids, labels=labels, decoder_input_ids=labels[:, :5].clamp(min=0))
    with pytest.raises(ValueError, match="attention_mask"):
        model(input_ids=ids, attention_mask=mask[:, :5], labels=labels)
    with pytest.raises(ValueError, match="input_ids"):
        model(input_ids=ids + 500, labels=labels)
    with pytest.raises(ValueError, match="decoder_input_ids"):
        XfmrT5Model(tiny()).eval()(input_ids=ids)
    model.config.decoder_start_token_id = None
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        model(input_ids=ids, labels=labels)
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        shift_tokens_right(labels, 0, None)


def test_shift_tokens_right():
    labels = torch.tensor([[5, 6, 7, -100], [8, -100, -100, -100]])
    assert shift_tokens_right(labels, 0, 3).tolist() == [[3, 5, 6, 7], [3, 8, 0, 0]]


def test_sequence_classification_reads_the_last_eos_and_needs_one():
    model = XfmrT5ForSequenceClassification(tiny(num_labels=3)).eval()
    ids, mask = padded_batch()
    out = model(input_ids=ids, attention_mask=mask)
    assert out.logits.shape == (3, 3)
    ids[0, ids[0] == 1] = 7
    with pytest.raises(ValueError, match="eos"):
        model(input_ids=ids, attention_mask=mask)


def test_encoder_model_equals_the_encoder_of_the_full_model():
    torch.manual_seed(0)
    full = XfmrT5ForConditionalGeneration(tiny()).eval()
    encoder = XfmrT5EncoderModel(tiny()).eval()
    encoder.load_state_dict({k[len("model."):]: v for k, v in full.state_dict().items()
                             if k.startswith(("model.shared", "model.encoder"))})
    ids, mask = padded_batch()
    labels, _ = padded_labels()
    assert_close(encoder(input_ids=ids, attention_mask=mask).last_hidden_state,
                 full(input_ids=ids, attention_mask=mask, labels=labels).encoder_last_hidden_state)
    assert hf_xfmr.to_transformers(encoder).__class__.__name__ == "T5EncoderModel"


@pytest.mark.parametrize("variant", ["tiny", "tiny-v1.1"])
def test_training_with_dropout_is_reproducible_under_gradient_checkpointing(variant):
    """Dropout on (the fused CPU kernels for v1.0): checkpointing replays the same masks, so loss and
    gradients are identical; the dropout masks really change the loss."""
    torch.manual_seed(0)
    model = XfmrT5ForConditionalGeneration(tiny(variant, dropout_rate=0.2)).train()
    ids, mask = padded_batch()
    labels, _ = padded_labels()

    def step(seed):
        model.zero_grad()
        torch.manual_seed(seed)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}
    loss, grads = step(1)
    other_loss, _ = step(2)
    assert not torch.equal(loss, other_loss)
    model.gradient_checkpointing_enable()
    loss_ckpt, grads_ckpt = step(1)
    assert_close(loss_ckpt, loss, atol=1e-6, rtol=1e-6)
    for name, grad in grads.items():
        assert_close(grads_ckpt[name], grad, atol=1e-6, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
