"""Hardening 2, model cards: no licence unless one is given, metrics measured on local data shown in the
card's text (not only "No evaluation results were given"), and `base_model` filled only with a real Hub id
(`hub_model_id`), from export, the CLI and pretraining's --push_to_hub alike. The finetuning side (a LoRA
run's card) is in tests/training/test_hardening2_finetune.py."""

import json

import pytest
from huggingface_hub import ModelCard

from hf_xfmr import cli
from hf_xfmr.hub import ExportError, export
from hf_xfmr.hub.cards import hub_model_id
from hf_xfmr.models import get_architecture

from .conftest import export_quietly, fitting_tokenizer, tiny_model


@pytest.fixture(scope="module")
def classifier():
    arch = get_architecture("bert")
    return tiny_model(arch, arch.classes["sequence-classification"])


def _card(folder):
    card = ModelCard.load(folder / "README.md")
    return card.data.to_dict(), card.text


def test_no_licence_unless_one_is_given(tmp_path, classifier, wordpiece_tokenizer, capsys):
    tokenizer = fitting_tokenizer(wordpiece_tokenizer, classifier)
    data, _ = _card(export_quietly(classifier, tokenizer, tmp_path / "plain"))
    assert "license" not in data
    data, _ = _card(export_quietly(classifier, tokenizer, tmp_path / "mit", license="mit"))
    assert data["license"] == "mit"
    # The command line has no default licence either.
    classifier.save_pretrained(tmp_path / "ckpt")
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp_path / "ckpt")
    assert cli.main(["export", str(tmp_path / "ckpt"), str(tmp_path / "cli")]) == 0
    assert "license" not in _card(tmp_path / "cli")[0]
    assert cli.main(["export", str(tmp_path / "ckpt"), str(tmp_path / "cli-mit"), "--license", "apache-2.0"]) == 0
    assert _card(tmp_path / "cli-mit")[0]["license"] == "apache-2.0"
    capsys.readouterr()


def test_metrics_on_other_data_are_shown_in_the_text_only(tmp_path, classifier, wordpiece_tokenizer):
    tokenizer = fitting_tokenizer(wordpiece_tokenizer, classifier)
    folder = export_quietly(classifier, tokenizer, tmp_path / "local", metrics={"accuracy": 0.875, "loss": 0.31},
                            eval_source="the validation split of local data (`dev.csv`)")
    data, text = _card(folder)
    assert "model-index" not in data and "No evaluation results were given" not in text
    assert "On the validation split of local data (`dev.csv`):" in text
    assert "| accuracy | 0.875 |" in text and "| loss | 0.31 |" in text
    # On a Hub dataset they also go into the model-index; without saying where, they are refused.
    folder = export_quietly(classifier, tokenizer, tmp_path / "hub", metrics={"accuracy": 0.875},
                            eval_dataset="glue", eval_dataset_config="sst2", eval_split="validation")
    data, text = _card(folder)
    assert data["model-index"][0]["results"][0]["metrics"][0]["value"] == 0.875
    assert "On glue (sst2), split `validation`:" in text
    with pytest.raises(ExportError, match="pass eval_dataset .* or eval_source"):
        export(classifier, tokenizer, tmp_path / "nowhere", metrics={"accuracy": 0.5})
    assert not (tmp_path / "nowhere").exists()


def test_hub_model_id_names_only_real_ids(tmp_path):
    assert hub_model_id("alice/tiny-bert") == "alice/tiny-bert"
    assert hub_model_id("bert-base-uncased") == "bert-base-uncased"  # a legacy id without owner
    assert hub_model_id(None) is None
    for not_an_id in ("runs/bert/model", "./ckpt", "ckpt/", "../x", "/abs/path"):
        assert hub_model_id(not_an_id) is None, not_an_id
    snapshot = tmp_path / "hub" / "models--alice--tiny-bert" / "snapshots" / "0a1b2c"
    snapshot.mkdir(parents=True)
    assert hub_model_id(snapshot) == "alice/tiny-bert"  # a folder of the Hugging Face cache
    local = tmp_path / "local"
    local.mkdir()
    assert hub_model_id(local) is None  # no config.json
    (local / "config.json").write_text(json.dumps({"model_type": "bert", "_name_or_path": "google/bert-tiny"}))
    assert hub_model_id(local) is None  # recorded by transformers 4: the model it was trained from (Hardening 3)
    (local / "config.json").write_text(json.dumps({"model_type": "bert", "_name_or_path": str(tmp_path)}))
    assert hub_model_id(local) is None  # a path is no id


def test_pretrain_card_shows_local_metrics_and_a_hub_base_model(tmp_path, monkeypatch, wordpiece_tokenizer):
    """pretrain --push_to_hub: metrics on local text go into the card's Evaluation section, --model_path in
    the Hub cache becomes base_model, and no licence is claimed."""
    import importlib

    import hf_xfmr.hub
    from hf_xfmr.training import PretrainArguments

    pretrain_module = importlib.import_module("hf_xfmr.training.pretrain")  # the module, not the function
    arch = get_architecture("bert")
    model = tiny_model(arch, arch.classes["masked-lm"])
    tokenizer = fitting_tokenizer(wordpiece_tokenizer, model)
    base = tmp_path / "models--alice--tiny-bert" / "snapshots" / "abc"
    model.save_pretrained(base)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n" * 20)
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"step": 1, "loss": 5.0}) + "\n")
    folder = tmp_path / "export"

    def publish(model, repo_id, *, tokenizer=None, **export_kwargs):  # export only, no upload
        return export_quietly(model, tokenizer, folder, repo_id=repo_id, **export_kwargs)

    monkeypatch.setattr(hf_xfmr.hub, "publish", publish)
    args = PretrainArguments(arch="bert", objective="mlm", dataset=str(corpus), model_path=str(base),
                             push_to_hub="me/tiny-bert", output_dir=str(tmp_path / "out"))
    pretrain_module.publish(model, tokenizer, args, {"eval_loss": 4.5, "eval_accuracy": 0.125}, log)
    data, text = _card(folder)
    assert data["base_model"] == "alice/tiny-bert" and "license" not in data and "model-index" not in data
    assert f"On held-out text of {corpus}:" in text and "| accuracy | 0.125 |" in text
