"""DistilBERT beyond parity: config errors and aliases, presets, no token types, gradient checkpointing,
save/load, Auto classes, and the two-layer classifier under PEFT."""

import json

import pytest
import torch
from torch.testing import assert_close
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from hf_xfmr.models import get_architecture
from hf_xfmr.models.distilbert import (
    XfmrDistilBertConfig,
    XfmrDistilBertForMaskedLM,
    XfmrDistilBertForQuestionAnswering,
    XfmrDistilBertForSequenceClassification,
    XfmrDistilBertModel,
)

NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0, qa_dropout=0.0, seq_classif_dropout=0.0)


@pytest.mark.parametrize("overrides,message", [
    (dict(dim=30), "`dim`=30 must be divisible by `n_heads`=4"),
    (dict(hidden_size=30), "`dim`=30 must be divisible by `n_heads`=4"),  # aliases are validated too
    (dict(n_layers=0), "`n_layers` must be a positive integer, got 0"),
    (dict(num_hidden_layers=0), "`n_layers` must be a positive integer, got 0"),
    (dict(activation="gleu"), "`activation`='gleu' is not supported"),
    (dict(seq_classif_dropout=1.0), r"`seq_classif_dropout` must be a probability in \[0, 1\)"),
    (dict(pad_token_id=5000), r"`pad_token_id`=5000 must be None or an id in \[0, vocab_size=1000\)"),
])
def test_invalid_config_values_name_the_field_the_value_and_the_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        XfmrDistilBertConfig.from_preset("tiny", **overrides)


def test_aliases_presets_and_registry():
    config = XfmrDistilBertConfig.from_preset("tiny", hidden_size=64, num_hidden_layers=3, num_attention_heads=8)
    assert (config.dim, config.n_layers, config.n_heads) == (64, 3, 8)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (64, 3, 8)
    base = XfmrDistilBertConfig.from_preset("base")
    assert (base.dim, base.n_layers, base.hidden_dim, base.vocab_size) == (768, 6, 3072, 30522)
    arch = get_architecture("distilbert")
    assert arch.model_type == "xfmr-distilbert" and arch.objectives == ("mlm",)
    assert set(arch.classes) == {"base", "masked-lm", "sequence-classification", "token-classification",
                                 "question-answering", "multiple-choice"}


@pytest.fixture
def tiny_mlm():
    torch.manual_seed(0)
    return XfmrDistilBertForMaskedLM(XfmrDistilBertConfig.from_preset("tiny")).eval()


def test_token_type_ids_are_refused_with_advice(tiny_mlm):
    ids = torch.randint(0, 1000, (2, 8))
    with pytest.raises(ValueError, match="XfmrDistilBertModel does not take `token_type_ids`; drop them"):
        tiny_mlm(input_ids=ids, token_type_ids=torch.zeros_like(ids))
    with pytest.raises(TypeError):
        XfmrDistilBertModel(tiny_mlm.config)(input_ids=ids, token_type_ids=torch.zeros_like(ids))


def test_bad_inputs_raise_before_computation(tiny_mlm):
    with pytest.raises(ValueError, match=r"`input_ids` contains 1000, outside the vocabulary \[0, 1000\)"):
        tiny_mlm(input_ids=torch.full((2, 8), 1000))
    with pytest.raises(ValueError, match="Sequence length 129 exceeds the 128 positions"):
        tiny_mlm(input_ids=torch.zeros(1, 129, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`attention_mask` has shape \(2, 7\)"):
        tiny_mlm(input_ids=torch.zeros(2, 8, dtype=torch.long), attention_mask=torch.ones(2, 7))


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    model = XfmrDistilBertForMaskedLM(XfmrDistilBertConfig.from_preset("tiny", **NO_DROPOUT)).train()
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


def test_save_pretrained_writes_safetensors_and_auto_classes_load_ours(tiny_mlm, tmp_path):
    tiny_mlm.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and not list(tmp_path.glob("*.bin"))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "xfmr-distilbert" and saved["dim"] == 32
    assert isinstance(AutoConfig.from_pretrained(tmp_path), XfmrDistilBertConfig)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is XfmrDistilBertForMaskedLM
    assert loaded.lm_head.decoder.weight is loaded.model.embeddings.word_embeddings.weight
    ids = torch.randint(0, 1000, (2, 8))
    assert torch.equal(loaded(input_ids=ids).logits, tiny_mlm(input_ids=ids).logits)


@pytest.mark.parametrize("auto_class,suffix", [
    (AutoModel, "Model"), (AutoModelForMaskedLM, "ForMaskedLM"),
    (AutoModelForSequenceClassification, "ForSequenceClassification"),
    (AutoModelForTokenClassification, "ForTokenClassification"),
    (AutoModelForQuestionAnswering, "ForQuestionAnswering"), (AutoModelForMultipleChoice, "ForMultipleChoice"),
])
def test_every_head_is_registered_with_its_auto_class(auto_class, suffix):
    model = auto_class.from_config(XfmrDistilBertConfig.from_preset("tiny"))
    assert type(model).__name__ == f"XfmrDistilBert{suffix}"


def test_head_dropouts_come_from_their_config_fields():
    config = XfmrDistilBertConfig.from_preset("tiny", dropout=0.05, qa_dropout=0.15, seq_classif_dropout=0.25)
    assert XfmrDistilBertForSequenceClassification(config).classifier.dropout.p == 0.25
    assert XfmrDistilBertForQuestionAnswering(config).qa_outputs.dropout.p == 0.15
    assert AutoModelForTokenClassification.from_config(config).classifier.dropout.p == 0.05


def test_lora_trains_and_saves_the_whole_two_layer_classifier(tmp_path):
    """PEFT's SEQ_CLS default `modules_to_save` is ["classifier", "score"]: the pre-classifier layer is inside
    our `classifier`, so it is trained and saved with the adapter (it would be lost if it sat beside it)."""
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    model = XfmrDistilBertForSequenceClassification(XfmrDistilBertConfig.from_preset("tiny", num_labels=2))
    lora = peft.get_peft_model(model, peft.LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["q_proj", "v_proj"]))
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert any("classifier.modules_to_save" in n and ".dense." in n for n in trainable)
    assert any("lora_A" in n for n in trainable) and not any("up_proj" in n for n in trainable)
    ids = torch.randint(3, 1000, (4, 8))
    lora.train()
    lora(input_ids=ids, labels=torch.tensor([0, 1, 0, 1])).loss.backward()
    torch.optim.SGD([p for p in lora.parameters() if p.requires_grad], lr=1.0).step()
    lora.eval()
    expected = lora(input_ids=ids).logits
    lora.save_pretrained(tmp_path)
    torch.manual_seed(0)
    fresh = XfmrDistilBertForSequenceClassification(XfmrDistilBertConfig.from_preset("tiny", num_labels=2))
    reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path).eval()
    assert_close(reloaded(input_ids=ids).logits, expected, atol=1e-6, rtol=1e-6)
