"""ELECTRA behaviour beyond parity: config checks, presets, the generator's derived size, bad input, gradient
checkpointing, save/load, Auto classes, drop-in loading of a transformers checkpoint folder."""

import pytest
import torch
import transformers
from torch.testing import assert_close
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

import hf_xfmr
from hf_xfmr.models.electra import (
    XfmrElectraConfig,
    XfmrElectraForMaskedLM,
    XfmrElectraForMultipleChoice,
    XfmrElectraForPreTraining,
    XfmrElectraForQuestionAnswering,
    XfmrElectraForSequenceClassification,
    XfmrElectraForTokenClassification,
    XfmrElectraModel,
)
from hf_xfmr.models.registry import get_architecture


@pytest.mark.parametrize("field,value,message", [
    ("hidden_size", 30, "`hidden_size`=30 must be divisible by `num_attention_heads`=4"),
    ("embedding_size", 0, "`embedding_size` must be a positive integer, got 0"),
    ("hidden_act", "gleu", "`hidden_act`='gleu' is not supported"),
    ("summary_type", "last", "`summary_type`='last' is not supported; valid values are: 'first'"),
    ("summary_last_dropout", 1.0, "`summary_last_dropout` must be a probability in \\[0, 1\\)"),
    ("generator_size_ratio", 0.0, "`generator_size_ratio` must be in \\(0, 1\\].*0.25 in the paper"),
    ("generator_size_ratio", 1.5, "`generator_size_ratio` must be in \\(0, 1\\]"),
    ("discriminator_loss_weight", -1.0, "`discriminator_loss_weight` must be a finite number >= 0"),
    ("generator_loss_weight", float("nan"), "`generator_loss_weight` must be a finite number >= 0"),
    ("pad_token_id", 5000, "`pad_token_id`=5000 must be None or an id in \\[0, vocab_size=1000\\)"),
])
def test_invalid_config_values_name_the_field_the_value_and_the_fix(field, value, message):
    with pytest.raises(ValueError, match=message):
        XfmrElectraConfig.from_preset("tiny", **{field: value})


def test_both_loss_weights_zero_is_refused():
    with pytest.raises(ValueError, match="both 0: nothing would be trained"):
        XfmrElectraConfig.from_preset("tiny", generator_loss_weight=0, discriminator_loss_weight=0)


def test_presets_are_the_published_sizes():
    sizes = {name: (c.embedding_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size)
             for name in ("small", "base", "large", "small-generator", "base-generator", "large-generator")
             for c in [XfmrElectraConfig.from_preset(name)]}
    assert sizes == {
        "small": (128, 256, 12, 4, 1024), "base": (768, 768, 12, 12, 3072), "large": (1024, 1024, 24, 16, 4096),
        "small-generator": (128, 256, 12, 4, 1024), "base-generator": (768, 256, 12, 4, 1024),
        "large-generator": (1024, 256, 24, 4, 1024),
    }
    assert XfmrElectraConfig.from_preset("small").vocab_size == 30522
    default = XfmrElectraConfig()  # transformers' ElectraConfig defaults: the small discriminator
    assert (default.embedding_size, default.hidden_size, default.num_attention_heads) == (128, 256, 4)
    assert (default.generator_size_ratio, default.generator_loss_weight, default.discriminator_loss_weight) == \
        (0.25, 1.0, 50.0)
    with pytest.raises(ValueError, match="Unknown preset 'huge'"):
        XfmrElectraConfig.from_preset("huge")


@pytest.mark.parametrize("preset,ratio,expected", [
    ("base", 0.25, (192, 3, 768)),  # 12 heads of 64 -> 3 heads of 64
    ("base", 1 / 3, (256, 4, 1024)),  # the published base generator
    ("small", 0.25, (64, 1, 256)),
    ("tiny", 0.25, (8, 1, 16)),
    ("tiny", 0.01, (8, 1, 1)),  # at least one head of the discriminator's head size
    ("tiny", 1.0, (32, 4, 64)),
])
def test_generator_config_scales_heads_and_widths_keeping_the_head_size(preset, ratio, expected):
    config = XfmrElectraConfig.from_preset(preset, generator_size_ratio=ratio)
    generator = config.generator_config()
    assert (generator.hidden_size, generator.num_attention_heads, generator.intermediate_size) == expected
    assert generator.hidden_size // generator.num_attention_heads == config.hidden_size // config.num_attention_heads
    for same in ("vocab_size", "embedding_size", "max_position_embeddings", "type_vocab_size", "num_hidden_layers",
                 "unpad_inputs", "pad_token_id"):
        assert getattr(generator, same) == getattr(config, same)


@pytest.fixture
def tiny_generator():
    torch.manual_seed(0)
    return XfmrElectraForMaskedLM(XfmrElectraConfig.from_preset("tiny")).eval()


def test_bad_inputs_raise_before_computation(tiny_generator):
    ids = torch.randint(0, 1000, (2, 8))
    with pytest.raises(ValueError, match="`input_ids` contains 1000, outside the vocabulary \\[0, 1000\\)"):
        tiny_generator(input_ids=torch.full((2, 8), 1000))
    with pytest.raises(ValueError, match="Sequence length 129 exceeds the 128 positions"):
        tiny_generator(input_ids=torch.zeros(1, 129, dtype=torch.long))
    with pytest.raises(ValueError, match="`token_type_ids` contains 2, outside the token types \\[0, 2\\)"):
        tiny_generator(input_ids=ids, token_type_ids=torch.full((2, 8), 2))
    discriminator = XfmrElectraForPreTraining(XfmrElectraConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match="labels"):
        discriminator(input_ids=ids, labels=torch.zeros(2, 7, dtype=torch.long))


def test_inputs_embeds_are_in_the_embedding_space_and_equal_input_ids(tiny_generator):
    ids = torch.randint(0, 1000, (2, 8))
    embeds = tiny_generator.get_input_embeddings()(ids)
    assert embeds.shape == (2, 8, 16)  # E, projected to C = 32 inside the model
    assert_close(tiny_generator(inputs_embeds=embeds).logits, tiny_generator(input_ids=ids).logits)


def test_generator_decoder_is_tied_and_survives_save_and_load(tiny_generator, tmp_path):
    assert tiny_generator.lm_head.decoder.weight is tiny_generator.model.embeddings.word_embeddings.weight
    tiny_generator.save_pretrained(tmp_path)
    reloaded = XfmrElectraForMaskedLM.from_pretrained(tmp_path).eval()
    assert reloaded.lm_head.decoder.weight is reloaded.model.embeddings.word_embeddings.weight
    ids = torch.randint(0, 1000, (2, 8))
    assert torch.equal(reloaded(input_ids=ids).logits, tiny_generator(input_ids=ids).logits)
    untied = XfmrElectraForMaskedLM(XfmrElectraConfig.from_preset("tiny", tie_word_embeddings=False))
    assert untied.lm_head.decoder.weight is not untied.model.embeddings.word_embeddings.weight


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    config = XfmrElectraConfig.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = XfmrElectraForPreTraining(config).train()
    ids = torch.randint(3, 1000, (2, 10))
    labels = torch.randint(0, 2, (2, 10))

    def grads():
        model.zero_grad()
        model(input_ids=ids, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.activation_checkpointing_enable()
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-5)


def test_auto_classes_build_and_load_every_head(tmp_path):
    config = XfmrElectraConfig.from_preset("tiny", num_labels=2)
    expected = {
        AutoModel: XfmrElectraModel, AutoModelForPreTraining: XfmrElectraForPreTraining,
        AutoModelForMaskedLM: XfmrElectraForMaskedLM,
        AutoModelForSequenceClassification: XfmrElectraForSequenceClassification,
        AutoModelForTokenClassification: XfmrElectraForTokenClassification,
        AutoModelForQuestionAnswering: XfmrElectraForQuestionAnswering,
        AutoModelForMultipleChoice: XfmrElectraForMultipleChoice,
    }
    for auto, cls in expected.items():
        assert type(auto.from_config(config)) is cls
    XfmrElectraForPreTraining(config).save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is XfmrElectraConfig
    assert type(AutoModelForPreTraining.from_pretrained(tmp_path)) is XfmrElectraForPreTraining
    assert get_architecture("electra").model_class("pretraining") is XfmrElectraForPreTraining


def test_a_transformers_folder_loads_into_our_classes_converted(tmp_path):
    ref_config = transformers.ElectraConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
    ref = transformers.ElectraForMaskedLM(ref_config).eval()
    ref.save_pretrained(tmp_path)
    ours = XfmrElectraForMaskedLM.from_pretrained(tmp_path).eval()
    assert ours.config.unpad_inputs  # our fields keep their defaults
    ids = torch.randint(3, 99, (2, 9))
    assert_close(ours(input_ids=ids).logits, ref(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    assert type(XfmrElectraConfig.from_pretrained(tmp_path)) is XfmrElectraConfig
    with pytest.raises(ValueError, match="cannot load"):
        hf_xfmr.models.bert.XfmrBertForMaskedLM.from_pretrained(tmp_path)


@pytest.mark.slow  # one compilation per head (seconds on CPU)
@pytest.mark.parametrize("model_class", [XfmrElectraForSequenceClassification, XfmrElectraForPreTraining])
def test_fullgraph_compile_with_and_without_a_mask(model_class):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = model_class(XfmrElectraConfig.from_preset("tiny", num_labels=2)).eval()
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    ids = torch.randint(5, 1000, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    labels = torch.randint(0, 2, (2,) if model_class is XfmrElectraForSequenceClassification else (2, 9))
    with torch.no_grad():
        for kwargs in ({}, {"attention_mask": mask}):
            expected = model(input_ids=ids, labels=labels, **kwargs)
            got = compiled(input_ids=ids, labels=labels, **kwargs)
            keep = kwargs.get("attention_mask", torch.ones_like(ids)).bool()
            if got.logits.dim() == 2 and got.logits.shape == ids.shape:  # per token: compiled runs padded, so
                got_logits, expected_logits = got.logits[keep], expected.logits[keep]  # compare real positions
            else:
                got_logits, expected_logits = got.logits, expected.logits
            assert_close(got_logits, expected_logits, atol=1e-5, rtol=1e-5)
            assert_close(got.loss, expected.loss, atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()
