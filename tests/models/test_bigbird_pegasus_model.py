"""BigBird-Pegasus model behaviour: config validation and presets, Auto registration, save/load, chunked loss == full
loss (final_logits_bias included), gradient checkpointing and eager == sdpa, dropout only in training, the choice of
block-sparse or full attention per forward (not for good, as the reference's), the unpadded block-sparse path running
the feed-forward blocks on the real tokens only, resize_token_embeddings, and the errors for bad inputs."""

import pytest
import torch
from torch.testing import assert_close
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from hf_xfmr.models.bigbird_pegasus import (
    XfmrBigBirdPegasusConfig,
    XfmrBigBirdPegasusForCausalLM,
    XfmrBigBirdPegasusForConditionalGeneration,
    XfmrBigBirdPegasusForSequenceClassification,
    XfmrBigBirdPegasusModel,
    modeling_bigbird_pegasus,
)

from ._bigbird_pegasus import BLOCK, EOS, FULL_LENGTH, PAD, RANDOM, SPARSE_LENGTHS, padded_batch, padded_labels
from ._seq2seq import assert_checkpointing_and_eager_keep_the_step, assert_dropout_only_in_training


def tiny(**overrides):
    """The tiny preset with the test batches' vocabulary and block layout (sparse above 28 tokens)."""
    return XfmrBigBirdPegasusConfig.from_preset(
        "tiny", **{"vocab_size": 99, "block_size": BLOCK, "num_random_blocks": RANDOM, "max_position_embeddings": 64,
                   "decoder_start_token_id": PAD, **overrides})


def inputs_of(seq_len=SPARSE_LENGTHS[1]):
    ids, mask = padded_batch(seq_len=seq_len)
    labels, decoder_mask = padded_labels()
    return dict(input_ids=ids, attention_mask=mask, labels=labels, decoder_attention_mask=decoder_mask)


@pytest.fixture
def sparse_calls(monkeypatch):
    """The number of block-sparse attention calls the model makes."""
    calls = []
    kernel = modeling_bigbird_pegasus.block_sparse_attention

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return kernel(*args, **kwargs)
    monkeypatch.setattr(modeling_bigbird_pegasus, "block_sparse_attention", counted)
    return calls


@pytest.mark.parametrize("name", ["tiny", "large", "large-arxiv", "large-pubmed", "large-bigpatent"])
def test_presets(name):
    config = XfmrBigBirdPegasusConfig.from_preset(name)
    assert config.hidden_size == config.d_model and config.num_attention_heads == config.encoder_attention_heads
    assert (config.pad_token_id, config.eos_token_id, config.bos_token_id) == (0, 1, 2)
    assert config.attention_type == "block_sparse" and config.scale_embedding and not config.use_bias
    if name.startswith("large"):
        assert (config.d_model, config.encoder_layers, config.decoder_layers, config.encoder_ffn_dim) == (1024, 16, 16,
                                                                                                           4096)
        assert (config.vocab_size, config.max_position_embeddings, config.block_size, config.num_random_blocks) == (
            96103, 4096, 64, 3)


@pytest.mark.parametrize("kwargs,message", [
    (dict(d_model=0), "d_model"),
    (dict(d_model=30), "encoder_attention_heads"),
    (dict(decoder_attention_heads=3), "decoder_attention_heads"),
    (dict(activation_function="tanh"), "activation_function"),
    (dict(attention_type="sparse"), "attention_type"),
    (dict(block_size=0), "block_size"),
    (dict(num_random_blocks=-1), "num_random_blocks"),
    (dict(dropout=1.5), "dropout"),
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
    assert type(AutoConfig.for_model("xfmr-bigbird-pegasus")) is XfmrBigBirdPegasusConfig
    assert type(AutoModel.from_config(config)) is XfmrBigBirdPegasusModel
    causal = AutoModelForCausalLM.from_config(config)
    assert type(causal) is XfmrBigBirdPegasusForCausalLM
    assert causal.lm_head.weight is not causal.model.shared.weight  # untied, as the reference's causal LM
    assert config.is_encoder_decoder  # the causal LM changed its own copy only
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    assert type(model) is XfmrBigBirdPegasusForConditionalGeneration
    assert model.lm_head.weight is model.model.shared.weight
    model.final_logits_bias.normal_()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.final_logits_bias, model.final_logits_bias)
    inputs = inputs_of()
    assert_close(loaded(**inputs).logits, model(**inputs).logits)


def test_chunked_training_loss_equals_the_full_loss_and_the_bias_gets_no_gradient():
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny(dropout=0.0))
    model.final_logits_bias.normal_()
    inputs = inputs_of(FULL_LENGTH)  # the same encoder in both modes (block-sparse draws other blocks in training)
    model.eval()
    full = model(**inputs)
    model.train()
    chunked = model(**inputs)
    assert chunked.logits is None and full.logits.shape == (3, 8, 99)
    assert_close(chunked.loss, full.loss, atol=1e-6, rtol=1e-6)
    chunked.loss.backward()
    assert not model.final_logits_bias.requires_grad
    count = int((inputs["labels"] != -100).sum())
    halved = model(**inputs, num_items_in_batch=2 * count)
    assert_close(halved.loss, full.loss / 2, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("seq_len", [FULL_LENGTH, SPARSE_LENGTHS[1]])
@pytest.mark.parametrize("attention_dropout", [0.0, 0.2])
def test_gradient_checkpointing_and_eager_equal_the_default(attention_dropout, seq_len):
    torch.manual_seed(0)
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny(dropout=0.1, attention_dropout=attention_dropout,
                                                            activation_dropout=0.1)).train()
    assert_checkpointing_and_eager_keep_the_step(model, inputs_of(seq_len), seed=3)


def test_dropout_is_active_in_training_only():
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny(dropout=0.3))
    assert_dropout_only_in_training(model, inputs_of())


def test_short_inputs_run_full_attention_per_forward_not_for_good(sparse_calls):
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny()).eval()
    model(**inputs_of(FULL_LENGTH))
    assert sparse_calls == []  # 11 tokens <= (5 + 2 r) blocks: full attention
    model(**inputs_of(SPARSE_LENGTHS[1]))
    assert len(sparse_calls) == 2 and sparse_calls[0] == (3, 4, 36, 8)  # 35 tokens padded to 36, both layers
    model.config.attention_type = "original_full"
    model(**inputs_of(SPARSE_LENGTHS[1]))
    assert len(sparse_calls) == 2


def test_unpadded_block_sparse_runs_the_feed_forward_on_real_tokens_only(sparse_calls):
    model = XfmrBigBirdPegasusModel(tiny()).eval()
    inputs = inputs_of(SPARSE_LENGTHS[1])
    inputs.pop("labels"), inputs.pop("decoder_attention_mask")
    seen = []
    model.encoder.layers[0].mlp.up_proj.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    unpadded = model(**inputs).encoder_last_hidden_state
    model.config.unpad_inputs = False
    padded = model(**inputs).encoder_last_hidden_state
    real = int(inputs["attention_mask"].sum())
    assert seen == [(real, 32), (3, 36, 32)]  # N real tokens; the padded layout holds 3 x 36
    keep = inputs["attention_mask"].bool()
    assert_close(unpadded[keep], padded[keep], atol=1e-6, rtol=1e-6)
    assert not unpadded[~keep].any()


def test_block_sparse_refuses_what_it_cannot_take():
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny()).eval()
    ids, mask = padded_batch(seq_len=SPARSE_LENGTHS[0])
    with pytest.raises(ValueError, match="output_attentions.*original_full"):
        model(input_ids=ids, attention_mask=mask, output_attentions=True)
    positions = torch.cat([torch.arange(16), torch.arange(16)])[None].expand(3, -1)  # two sequences per row
    with pytest.raises(ValueError, match="packed.*original_full"):
        model.get_encoder()(input_ids=ids, position_ids=positions)
    square = torch.ones(3, 1, SPARSE_LENGTHS[0], SPARSE_LENGTHS[0], dtype=torch.bool)
    with pytest.raises(ValueError, match="4-D attention mask"):
        model.get_encoder()(input_ids=ids, attention_mask=square)


def test_output_attentions_and_hidden_states_under_full_attention():
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny(attention_type="original_full")).eval()
    out = model(**inputs_of(FULL_LENGTH), output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_attentions) == 2 and out.encoder_attentions[0].shape == (3, 4, 11, 11)
    assert out.decoder_attentions[0].shape == (3, 4, 8, 8) and out.cross_attentions[0].shape == (3, 4, 8, 11)
    assert len(out.encoder_hidden_states) == 3 and len(out.decoder_hidden_states) == 3
    assert_close(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)  # the final norm's output, as the ref
    assert out.decoder_attentions[0].triu(1).abs().max() == 0
    assert out.cross_attentions[0][2, :, :, 4:].abs().max() == 0


def test_resize_token_embeddings_resizes_the_logits_bias():
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny())
    model.final_logits_bias.normal_()
    old = model.final_logits_bias.clone()
    model.resize_token_embeddings(120)
    assert model.final_logits_bias.shape == (1, 120) and torch.equal(model.final_logits_bias[:, :99], old)
    assert (model.final_logits_bias[:, 99:] == 0).all()
    ids, mask = padded_batch(seq_len=SPARSE_LENGTHS[1])
    assert model.eval()(input_ids=ids, attention_mask=mask).logits.shape == (3, 35, 120)


def test_bad_inputs_fail_clearly():
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny()).eval()
    ids, mask = padded_batch(seq_len=SPARSE_LENGTHS[1])
    labels, _ = padded_labels()
    with pytest.raises(ValueError, match="decoder_input_ids.*labels"):
        model(input_ids=ids, labels=labels, decoder_input_ids=labels[:, :5].clamp(min=0))
    with pytest.raises(ValueError, match="attention_mask"):
        model(input_ids=ids, attention_mask=mask[:, :5], labels=labels)
    with pytest.raises(ValueError, match="decoder_attention_mask"):
        model(input_ids=ids, labels=labels, decoder_attention_mask=mask)
    with pytest.raises(ValueError, match="input_ids"):
        model(input_ids=ids + 500, labels=labels)
    with pytest.raises(ValueError, match="64 positions.*truncat"):
        model(input_ids=torch.full((1, 100), 5))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=ids, decoder_input_ids=torch.full((3, 100), 5))
    model.config.decoder_start_token_id = None
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        model(input_ids=ids, labels=labels)


def test_sequence_classification_reads_the_last_eos_and_needs_one():
    model = XfmrBigBirdPegasusForSequenceClassification(tiny(num_labels=3)).eval()
    ids, mask = padded_batch(seq_len=SPARSE_LENGTHS[1])
    assert model(input_ids=ids, attention_mask=mask).logits.shape == (3, 3)
    ids[0, ids[0] == EOS] = 7
    with pytest.raises(ValueError, match="eos"):
        model(input_ids=ids, attention_mask=mask)


def test_fresh_random_blocks_change_every_training_step_and_follow_torch_seed():
    torch.manual_seed(0)
    model = XfmrBigBirdPegasusForConditionalGeneration(tiny(random_blocks="fresh", dropout=0.0)).train()
    reference = XfmrBigBirdPegasusForConditionalGeneration(tiny(dropout=0.0)).train()
    reference.load_state_dict(model.state_dict())
    inputs = inputs_of(SPARSE_LENGTHS[1])
    torch.manual_seed(5)
    first = model(**inputs).loss
    second = model(**inputs).loss
    torch.manual_seed(5)
    assert torch.equal(model(**inputs).loss, first)  # torch's generator reproduces the draws
    assert not torch.equal(first, second)  # new blocks at each step (dropout is 0)
    assert torch.equal(reference(**inputs).loss, reference(**inputs).loss)  # the reference's pattern is fixed
    # In eval, "fresh" runs the reference's seeded training pattern (fixed, not all zeros).
    model.eval()
    assert_close(model(**inputs).loss, reference(**inputs).loss, atol=1e-6, rtol=1e-6)


@pytest.mark.slow  # one compilation of a training step (a minute on CPU)
def test_compile_of_a_block_sparse_training_step():
    """Two layers: each builds the reference's numpy pattern outside the graph (one break per layer)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = XfmrBigBirdPegasusModel(tiny(encoder_layers=2, dropout=0.0)).train()
    inputs = inputs_of(SPARSE_LENGTHS[1])
    embeds = model.shared(inputs["input_ids"]) * model.embed_scale  # (B, S, C)
    compiled = torch.compile(model.encoder, dynamic=False)
    got = compiled(embeds, inputs["attention_mask"])[0]
    expected = model.encoder(embeds, inputs["attention_mask"])[0]
    keep = inputs["attention_mask"].bool()
    assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-5)
    got.square().mean().backward()
    assert model.encoder.layers[0].attn.q_proj.weight.grad.abs().sum() > 0
    torch._dynamo.reset()
