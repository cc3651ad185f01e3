"""Hardening 3, loading side. Point 6: `hf_xfmr.from_transformers(src, task=..., num_labels=3)` takes the config
keywords `from_pretrained` takes (`num_labels`, `id2label`, `label2id`, `problem_type`, config fields) and builds
the head they describe; on a model instance they apply while its weights still fit, else a clear error. Point 7:
what a user would read as a problem is said once, or not at all: transformers' load report is held back where
our `ConversionWarning` says the same (a genuine problem, weights the model has no place for, is still named
once); legacy keys of a saved config.json load silently, as transformers' configs take them (a misspelt field
is still warned about); the adapter config of a LoRA run lists each module once. (The finetuning points 4 and 5
are in tests/training/test_hardening3_finetune.py, which also loads a repo id with `num_labels` from the test
Hub.)"""

import json
import logging
import warnings

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import hf_xfmr
from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM, XfmrBertForSequenceClassification
from hf_xfmr.models.conversion import ConversionWarning, held_load_report

from .conftest import tiny_hf_config


@pytest.fixture
def mlm_folder(tmp_path):
    """A tiny transformers BertForMaskedLM checkpoint."""
    transformers.BertForMaskedLM(tiny_hf_config("bert")).save_pretrained(tmp_path / "mlm")
    return tmp_path / "mlm"


@pytest.fixture
def classifier_folder(tmp_path):
    """A tiny transformers BertForSequenceClassification with two named labels."""
    config = tiny_hf_config("bert", id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "clf")
    return tmp_path / "clf"


def _quietly(call, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConversionWarning)
        return call(*args, **kwargs)


# -- point 6: from_transformers takes config keywords ------------------------------------------------------

def test_num_labels_builds_a_head_of_that_size_from_a_folder(mlm_folder):
    model = _quietly(hf_xfmr.from_transformers, mlm_folder, task="sequence-classification", num_labels=3)
    assert type(model).__name__ == "XfmrBertForSequenceClassification"
    assert model.classifier.out_features == 3 and model.config.num_labels == 3
    assert model.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    assert model.config.label2id == {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}
    assert model(input_ids=torch.tensor([[5, 6, 7]])).logits.shape == (1, 3)
    saved = load_file(str(mlm_folder / "model.safetensors"))  # the body is the checkpoint's
    torch.testing.assert_close(model.model.embeddings.word_embeddings.weight,
                               saved["bert.embeddings.word_embeddings.weight"], rtol=0, atol=0)
    # id2label alone sets label2id (and the size); problem_type and config fields are applied too.
    model = _quietly(hf_xfmr.from_transformers, mlm_folder, task="sequence-classification",
                     id2label={0: "neg", 1: "neu", 2: "pos"}, problem_type="multi_label_classification",
                     hidden_dropout_prob=0.25)
    assert model.classifier.out_features == 3 and model.config.label2id == {"neg": 0, "neu": 1, "pos": 2}
    assert model.config.problem_type == "multi_label_classification" and model.config.hidden_dropout_prob == 0.25
    with pytest.raises(ValueError, match="num_labels=2 contradicts the 3 labels of id2label"):
        hf_xfmr.from_transformers(mlm_folder, task="sequence-classification", num_labels=2,
                                  id2label={0: "a", 1: "b", 2: "c"})


def test_num_labels_replaces_a_checkpoint_head_of_another_size(classifier_folder):
    with pytest.warns(ConversionWarning, match=r"randomly initialised: classifier\.bias, classifier\.weight"):
        model = hf_xfmr.from_transformers(classifier_folder, num_labels=3)
    assert model.classifier.out_features == 3 and model.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    # The same number of labels keeps the checkpoint's head and names, as transformers does.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConversionWarning)
        same = hf_xfmr.from_transformers(classifier_folder, num_labels=2)
    assert same.config.id2label == {0: "neg", 1: "pos"}
    torch.testing.assert_close(same.classifier.weight, load_file(str(classifier_folder / "model.safetensors"))[
        "classifier.weight"], rtol=0, atol=0)


def test_config_keywords_on_an_instance_apply_while_its_weights_fit(classifier_folder):
    source = transformers.BertForSequenceClassification.from_pretrained(classifier_folder)
    renamed = hf_xfmr.from_transformers(source, id2label={0: "negative", 1: "positive"}, hidden_dropout_prob=0.2)
    assert renamed.config.id2label == {0: "negative", 1: "positive"}
    assert renamed.config.label2id == {"negative": 0, "positive": 1} and renamed.config.hidden_dropout_prob == 0.2
    torch.testing.assert_close(renamed.classifier.weight, source.classifier.weight, rtol=0, atol=0)
    assert hf_xfmr.from_transformers(source, num_labels=2).config.id2label == {0: "neg", 1: "pos"}
    with pytest.raises(ValueError, match=r"num_labels=3 change\(s\) the size of classifier\.bias, classifier\.weight, "
                                         r"which the weights of the BertForSequenceClassification cannot fill.*"
                                         r"pass the checkpoint's directory or Hub repo id"):
        hf_xfmr.from_transformers(source, num_labels=3)


def test_unknown_config_keywords_are_a_type_error(mlm_folder):
    with pytest.raises(TypeError, match=r"not a setting of XfmrBertConfig or BertConfig: `hiden_size` \(did you mean "
                                        r"`hidden_size`"):
        hf_xfmr.from_transformers(mlm_folder, hiden_size=64)
    with pytest.raises(TypeError, match="`device_map`"):  # a loading option, not a config setting
        hf_xfmr.from_transformers(mlm_folder, device_map="cpu")
    source = transformers.BertForMaskedLM(tiny_hf_config("bert"))
    with pytest.raises(TypeError, match=r"not a field of XfmrBertConfig \(a model instance keeps its transformers "
                                        r"config\): `use_cache`"):
        hf_xfmr.from_transformers(source, use_cache=False)


# -- point 7a: one report of the weights a load had to make up ------------------------------------------

def _load_logged(capfd, caplog, call, *args, **kwargs):
    """(result, ConversionWarning messages, everything transformers and we logged or printed). transformers'
    messages are also taken from its loading logger directly: its handler writes to the stream it found when
    transformers was imported, which capfd may not see."""
    transformers_log = []
    handler = logging.Handler()
    handler.emit = lambda record: transformers_log.append(record.getMessage())
    logging.getLogger("transformers.modeling_utils").addHandler(handler)
    try:
        with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = call(*args, **kwargs)
    finally:
        logging.getLogger("transformers.modeling_utils").removeHandler(handler)
    captured = capfd.readouterr()
    messages = [str(w.message) for w in caught if issubclass(w.category, ConversionWarning)]
    return result, messages, captured.out + captured.err + caplog.text + "".join(transformers_log)


def test_a_new_head_is_reported_once_by_our_warning(mlm_folder, capfd, caplog):
    model, ours, logged = _load_logged(capfd, caplog, XfmrBertForSequenceClassification.from_pretrained, mlm_folder)
    assert type(model).__name__ == "XfmrBertForSequenceClassification"
    assert "LOAD REPORT" not in logged and "MISSING" not in logged and "UNEXPECTED" not in logged
    assert len(ours) == 1 and "randomly initialised: bert.pooler.dense.bias" in ours[0]
    assert "classifier.weight" in ours[0] and "cls.predictions" not in ours[0]  # the MLM head left behind: no problem


def test_weights_the_model_has_no_place_for_are_still_reported_once(mlm_folder, capfd, caplog):
    weights = load_file(str(mlm_folder / "model.safetensors"))
    weights["bert.encoder.layer.0.attention.self.extra.weight"] = torch.zeros(4, 4)
    save_file(weights, str(mlm_folder / "model.safetensors"), metadata={"format": "pt"})
    _, ours, logged = _load_logged(capfd, caplog, XfmrBertForMaskedLM.from_pretrained, mlm_folder)
    assert "LOAD REPORT" not in logged
    assert len(ours) == 1 and "holds 1 weight(s) that the XfmrBertForMaskedLM built for task 'masked-lm' has no " \
        "parameter for, so they are not used: bert.encoder.layer.0.attention.self.extra.weight" in ours[0]


def test_the_held_report_is_logged_when_the_load_fails():
    report = logging.getLogger("transformers.modeling_utils")
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    report.addHandler(handler)
    try:
        with held_load_report() as held:
            report.warning("BertModel LOAD REPORT from: here")
            report.warning("another message")
        assert seen == ["another message"] and len(held) == 1  # held back, the rest passes
        with pytest.raises(RuntimeError, match="look at the report"):
            with held_load_report():
                report.warning("BertModel LOAD REPORT from: there")
                raise RuntimeError("look at the report above")
        assert seen[-1] == "BertModel LOAD REPORT from: there"  # a failed load shows it after all
    finally:
        report.removeHandler(handler)


# -- point 7b: legacy config keys ---------------------------------------------------------------------------

LEGACY = {"gradient_checkpointing": False, "output_past": True, "use_cache": True, "transformers_version": "4.6.0",
          "architectures": ["XfmrBertForMaskedLM"], "xla_device": None, "is_decoder": False, "torchscript": False}


def test_legacy_keys_of_a_saved_config_load_silently(tmp_path):
    torch.manual_seed(0)
    XfmrBertForMaskedLM(XfmrBertConfig.from_preset("tiny")).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, **LEGACY}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = XfmrBertForMaskedLM.from_pretrained(tmp_path)
        config = transformers.AutoConfig.from_pretrained(tmp_path)
    assert not [str(w.message) for w in caught if "config" in str(w.message)]
    assert type(model).__name__ == "XfmrBertForMaskedLM"
    assert config.gradient_checkpointing is False and config.output_past is True  # kept, as transformers does
    # A misspelt field is still a warning (the field keeps its default), and a keyword typo still a TypeError.
    (tmp_path / "config.json").write_text(json.dumps({**saved, **LEGACY, "num_hiden_layers": 4}))
    with pytest.warns(UserWarning, match=r"misspelt fields of XfmrBertConfig: `num_hiden_layers` \(did you mean "
                                         r"`num_hidden_layers`\?\)") as caught:
        transformers.AutoConfig.from_pretrained(tmp_path)
    assert not any("gradient_checkpointing" in str(w.message) for w in caught)
    with pytest.raises(TypeError, match="has no field `gradient_checkpointing`"):
        XfmrBertConfig(gradient_checkpointing=True)


# -- point 7c: the adapter config lists each module once ----------------------------------------------------

def test_lora_modules_to_save_has_no_duplicates(tmp_path):
    from hf_xfmr.training.finetune import apply_lora

    torch.manual_seed(0)
    model = XfmrBertForSequenceClassification(XfmrBertConfig.from_preset("tiny", num_labels=3))
    lora = apply_lora(model, "sequence-classification", fresh_modules={"classifier", "model.pooler.dense"})
    lora.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "adapter_config.json").read_text())["modules_to_save"]
    assert len(saved) == len(set(saved)) and {"classifier", "model.pooler.dense"} <= set(saved)


@pytest.mark.parametrize("arch", ["gpt", "bart"])
def test_decoder_outputs_use_transformers_cache_field_without_deprecation_noise(arch, monkeypatch):
    """transformers 5.24 renamed the outputs' `past_key_values` to `cache` and logs a deprecation for the old
    name: a plain forward and `generate()` of our decoders must not print it."""
    import transformers.utils.generic as generic

    from hf_xfmr.models import get_architecture

    said = []
    monkeypatch.setattr(generic.logger, "warning_once", lambda message, *a, **k: said.append(message))
    config = get_architecture(arch).config_class.from_preset("tiny")
    model = get_architecture(arch).model_class("causal-lm")(config).eval()
    out = model(input_ids=torch.tensor([[5, 6, 7]]))
    assert out.cache is not None
    model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=2, do_sample=False)
    assert not [m for m in said if "deprecated" in m], said


def test_peft_and_an_adapter_save_from_a_transformers_base_print_no_deprecation_or_type_warning(tmp_path, caplog):
    """`get_peft_model` reads `is_gradient_checkpointing` (a FutureWarning in transformers 5), and saving an adapter
    reads the base model's config with our config class, which for a transformers checkpoint was transformers'
    "model of type `bert` to instantiate a model of type `xfmr-bert`" warning, once per saved checkpoint."""
    from peft import LoraConfig, get_peft_model

    from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForSequenceClassification

    folder = tmp_path / "bert"
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    converted = XfmrBertConfig.from_pretrained(folder)
    assert type(converted).__name__ == "XfmrBertConfig" and converted.hidden_size == 32
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        model = XfmrBertForSequenceClassification.from_pretrained(folder)
        peft_model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", target_modules=["q_proj", "v_proj"]))
    with caplog.at_level(logging.WARNING, logger="transformers"):
        peft_model.save_pretrained(tmp_path / "adapter")
    assert not [r for r in caplog.records if "to instantiate a model of type" in r.getMessage()]
