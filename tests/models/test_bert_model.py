"""BERT/RoBERTa behaviour beyond parity: configs, presets, bad input, checkpointing, save/load, Auto classes."""

import json

import pytest
import torch
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
from hf_xfmr.models.bert import (
    XfmrBertConfig,
    XfmrBertForMaskedLM,
    XfmrBertForPreTraining,
    XfmrBertForSequenceClassification,
    XfmrBertModel,
)
from hf_xfmr.models.roberta import XfmrRobertaConfig, XfmrRobertaForMaskedLM


@pytest.mark.parametrize("field,value,message", [
    ("hidden_size", 30, "`hidden_size`=30 must be divisible by `num_attention_heads`=4"),
    ("num_hidden_layers", 0, "`num_hidden_layers` must be a positive integer, got 0"),
    ("vocab_size", -5, "`vocab_size` must be a positive integer, got -5"),
    ("hidden_act", "gleu", "`hidden_act`='gleu' is not supported; valid values are: 'gelu'"),
    ("position_embedding_type", "relative_key", "`position_embedding_type`='relative_key' is not supported"),
    ("hidden_dropout_prob", 1.5, "`hidden_dropout_prob` must be a probability in \\[0, 1\\)"),
    ("pad_token_id", 5000, "`pad_token_id`=5000 must be None or an id in \\[0, vocab_size=1000\\)"),
])
def test_invalid_config_values_name_the_field_the_value_and_the_fix(field, value, message):
    with pytest.raises(ValueError, match=message):
        XfmrBertConfig.from_preset("tiny", **{field: value})


def test_presets_and_unknown_preset():
    base = XfmrBertConfig.from_preset("base")
    assert (base.hidden_size, base.num_hidden_layers, base.num_attention_heads) == (768, 12, 12)
    large = XfmrRobertaConfig.from_preset("large")
    assert (large.hidden_size, large.num_hidden_layers, large.vocab_size) == (1024, 24, 50265)
    assert XfmrBertConfig.from_preset("tiny", num_hidden_layers=3).num_hidden_layers == 3
    with pytest.raises(ValueError, match="Unknown preset 'huge'; available presets: base, large, tiny"):
        XfmrBertConfig.from_preset("huge")


@pytest.fixture
def tiny_mlm():
    torch.manual_seed(0)
    return XfmrBertForMaskedLM(XfmrBertConfig.from_preset("tiny")).eval()


def test_bad_inputs_raise_before_computation(tiny_mlm):
    ids = torch.randint(0, 1000, (2, 8))
    with pytest.raises(ValueError, match="`input_ids` contains 1000, outside the vocabulary \\[0, 1000\\)"):
        tiny_mlm(input_ids=torch.full((2, 8), 1000))
    with pytest.raises(ValueError, match="`attention_mask` has shape \\(2, 7\\) but the inputs have shape \\(2, 8\\)"):
        tiny_mlm(input_ids=ids, attention_mask=torch.ones(2, 7))
    with pytest.raises(ValueError, match="Sequence length 129 exceeds the 128 positions"):
        tiny_mlm(input_ids=torch.zeros(1, 129, dtype=torch.long))
    with pytest.raises(ValueError, match="`token_type_ids` contains 2, outside the token types \\[0, 2\\)"):
        tiny_mlm(input_ids=ids, token_type_ids=torch.full((2, 8), 2))
    with pytest.raises(ValueError, match="exactly one of `input_ids` or `inputs_embeds`"):
        tiny_mlm()
    with pytest.raises(TypeError, match=r"`input_ids` has dtype torch.float32.*cast them with `input_ids.long\(\)`"):
        tiny_mlm(input_ids=ids.float())


def test_inputs_embeds_equal_input_ids(tiny_mlm):
    ids = torch.randint(0, 1000, (2, 8))
    embeds = tiny_mlm.get_input_embeddings()(ids)
    assert_close(tiny_mlm(inputs_embeds=embeds).logits, tiny_mlm(input_ids=ids).logits)


def test_mlm_decoder_is_tied_to_the_input_embeddings(tiny_mlm, tmp_path):
    assert tiny_mlm.lm_head.decoder.weight is tiny_mlm.model.embeddings.word_embeddings.weight
    tiny_mlm.save_pretrained(tmp_path)
    reloaded = XfmrBertForMaskedLM.from_pretrained(tmp_path)
    assert reloaded.lm_head.decoder.weight is reloaded.model.embeddings.word_embeddings.weight
    untied = XfmrBertForMaskedLM(XfmrBertConfig.from_preset("tiny", tie_word_embeddings=False))
    assert untied.lm_head.decoder.weight is not untied.model.embeddings.word_embeddings.weight


def test_resize_token_embeddings_keeps_head_and_bias_consistent(tiny_mlm):
    tiny_mlm.resize_token_embeddings(1010)
    assert tiny_mlm.lm_head.decoder.weight.shape == (1010, 32)
    assert tiny_mlm.lm_head.decoder.bias.shape == (1010,)
    assert tiny_mlm(input_ids=torch.tensor([[1005, 3]])).logits.shape == (1, 2, 1010)


@pytest.mark.parametrize("model_class,config_class", [
    (XfmrBertForPreTraining, XfmrBertConfig), (XfmrRobertaForMaskedLM, XfmrRobertaConfig),
])
def test_gradient_checkpointing_gives_the_same_gradients(model_class, config_class):
    torch.manual_seed(0)
    config = config_class.from_preset("tiny", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = model_class(config).train()
    ids = torch.randint(3, 1000, (2, 10))
    labels = torch.where(torch.rand(2, 10) < 0.5, ids, -100)
    labels[0, 0] = ids[0, 0]

    def grads():
        model.zero_grad()
        model(input_ids=ids, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain = grads()
    model.gradient_checkpointing_enable()
    assert all(layer.gradient_checkpointing for layer in model.model.layers)
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        assert_close(checkpointed[name], plain[name], atol=1e-6, rtol=1e-5)


def test_output_attentions_falls_back_to_eager_and_sdpa_equals_eager():
    torch.manual_seed(0)
    config = XfmrBertConfig.from_preset("tiny")
    sdpa = XfmrBertModel._from_config(config, attn_implementation="sdpa").eval()
    eager = XfmrBertModel._from_config(config, attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    ids = torch.randint(3, 1000, (2, 9))
    mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4])
    out = sdpa(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert len(out.attentions) == 2 and out.attentions[0].shape == (2, 4, 9, 9)
    assert_close(out.attentions[0][1, :, :, 5:], torch.zeros(4, 9, 4))  # padding gets no attention
    keep = mask.bool()  # without output_attentions the batch runs unpadded: compare real positions
    assert_close(out.last_hidden_state[keep], eager(input_ids=ids, attention_mask=mask).last_hidden_state[keep],
                 atol=1e-6, rtol=1e-5)
    sdpa.set_attn_implementation("eager")
    assert sdpa.config._attn_implementation == "eager"


def test_save_pretrained_writes_safetensors_and_auto_classes_load_ours(tiny_mlm, tmp_path):
    tiny_mlm.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert not list(tmp_path.glob("*.bin"))
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "xfmr-bert"
    assert isinstance(AutoConfig.from_pretrained(tmp_path), XfmrBertConfig)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is XfmrBertForMaskedLM
    ids = torch.randint(0, 1000, (2, 8))
    assert torch.equal(loaded(input_ids=ids).logits, tiny_mlm(input_ids=ids).logits)


AUTO_HEADS = [
    (AutoModel, "Model"), (AutoModelForPreTraining, "ForPreTraining"), (AutoModelForMaskedLM, "ForMaskedLM"),
    (AutoModelForSequenceClassification, "ForSequenceClassification"),
    (AutoModelForTokenClassification, "ForTokenClassification"),
    (AutoModelForQuestionAnswering, "ForQuestionAnswering"), (AutoModelForMultipleChoice, "ForMultipleChoice"),
]


@pytest.mark.parametrize("config_class,auto_class,suffix", [
    *[(XfmrBertConfig, *head) for head in AUTO_HEADS],
    # RoBERTa has no NSP pretraining head, as in transformers.
    *[(XfmrRobertaConfig, *head) for head in AUTO_HEADS if head[1] != "ForPreTraining"],
])
def test_every_head_is_registered_with_its_auto_class(config_class, auto_class, suffix):
    arch = "Bert" if config_class is XfmrBertConfig else "Roberta"
    model = auto_class.from_config(config_class.from_preset("tiny"))
    assert type(model).__name__ == f"Xfmr{arch}{suffix}"


def test_classifier_head_named_for_peft_defaults():
    model = XfmrBertForSequenceClassification(XfmrBertConfig.from_preset("tiny", num_labels=3))
    assert model.classifier.out_features == 3  # PEFT's SEQ_CLS modules_to_save default is ["classifier", ...]
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"} <= names


def test_version_and_public_api():
    assert hf_xfmr.__version__
    assert callable(hf_xfmr.from_transformers) and callable(hf_xfmr.to_transformers)


def test_return_dict_false_gives_tuples_like_transformers(tiny_mlm):
    ids = torch.randint(0, 1000, (2, 8))
    labels = ids.clone()
    loss, logits = tiny_mlm(input_ids=ids, labels=labels, return_dict=False)
    out = tiny_mlm(input_ids=ids, labels=labels)
    assert torch.equal(loss, out.loss) and torch.equal(logits, out.logits)
    hidden, pooled = XfmrBertModel(XfmrBertConfig.from_preset("tiny")).eval()(input_ids=ids, return_dict=False)
    assert hidden.shape == (2, 8, 32) and pooled.shape == (2, 32)
