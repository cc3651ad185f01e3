"""`hf_xfmr.training.finetune` end to end: learning, LoRA save/reload/merge, best-checkpoint reload,
finetuning from MLM checkpoints pretrained with sparse prediction, tagging, QA, gradient accumulation."""

import json

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

import hf_xfmr.hub
from hf_xfmr.plots import loss_curves, read_log

from hf_xfmr.training.finetune import finetune, load_adapter_model

from .finetune_helpers import (  # noqa: F401  (one_thread is an autouse fixture)
    COLORS,
    one_thread,
    qa_rows,
    quick_args,
    save_mlm_checkpoint,
    save_transformers_checkpoint,
    sentiment_dataset,
    tagging_rows,
)


def _eval_logs(log_file):
    return [row for row in map(json.loads, log_file.read_text().splitlines()) if "eval_loss" in row]


def test_full_finetune_from_scratch_learns_and_logs(tmp_path, wordpiece_tokenizer):
    result = finetune(quick_args(tmp_path), dataset=sentiment_dataset(test=48), tokenizer=wordpiece_tokenizer)

    evals = _eval_logs(result.log_file)
    assert [e["step"] for e in evals[:3]] == [8, 16, 24]
    assert result.metrics["eval"]["eval_accuracy"] >= 0.9
    assert result.metrics["test"]["test_accuracy"] >= 0.9
    baseline = result.metrics["baseline"]["test_majority_accuracy"]
    assert 0.3 < baseline < 0.7 and result.metrics["test"]["test_accuracy"] > baseline + 0.25
    losses = [row["loss"] for row in map(json.loads, result.log_file.read_text().splitlines()) if "loss" in row]
    assert losses[-1] < losses[0]
    curves = loss_curves(read_log(result.log_file))  # what the loss-curve plots read
    assert len(curves.train) == 6 and [s for s, _ in curves.eval][:3] == [8, 16, 24]
    # The JSON-lines log is Trainer's log history, one object per line, in order.
    logged = [json.loads(line) for line in result.log_file.read_text().splitlines()]
    assert logged == json.loads(json.dumps(result.trainer.state.log_history))
    saved = json.loads(result.metrics_file.read_text())
    assert saved["eval"]["eval_accuracy"] == result.metrics["eval"]["eval_accuracy"]
    assert result.label_names == ["negative", "positive"]
    assert (result.model_dir / "model.safetensors").is_file() and (result.model_dir / "tokenizer.json").is_file()
    assert not (result.output_dir / "checkpoints").exists()  # removed unless keep_checkpoints
    reloaded = AutoModelForSequenceClassification.from_pretrained(result.model_dir)
    assert reloaded.config.id2label == {0: "negative", 1: "positive"}


def test_best_checkpoint_is_the_one_reloaded(tmp_path, wordpiece_tokenizer):
    # "Best" = lowest accuracy here, so that it is an early checkpoint and not the last one.
    args = quick_args(tmp_path, keep_checkpoints=True, greater_is_better=False, learning_rate=3e-3)
    result = finetune(args, dataset=sentiment_dataset(), tokenizer=wordpiece_tokenizer)

    evals = _eval_logs(result.log_file)[:3]  # the three evaluations during training
    accuracies = [e["eval_accuracy"] for e in evals]
    worst = evals[int(np.argmin(accuracies))]
    assert result.best_checkpoint == f"checkpoint-{worst['step']}" != "checkpoint-24"
    assert result.metrics["eval"]["eval_accuracy"] == pytest.approx(worst["eval_accuracy"])
    checkpoints = result.output_dir / "checkpoints"
    best = load_file(checkpoints / result.best_checkpoint / "model.safetensors")
    last = load_file(checkpoints / "checkpoint-24" / "model.safetensors")
    state = result.model.state_dict()
    for key, value in best.items():
        torch.testing.assert_close(state[key], value, rtol=0, atol=0)
    assert any(not torch.equal(best[k], last[k]) for k in best)


@pytest.mark.parametrize("source", ["xfmr", "transformers"])
def test_lora_adapter_reload_and_merge(tmp_path, wordpiece_tokenizer, source):
    """LoRA from a pretrained checkpoint: the adapter (+ head + new pooler) reloads onto a fresh base and
    equals the merged model loaded through the Auto class, within 1e-5."""
    if source == "xfmr":
        checkpoint = save_mlm_checkpoint(tmp_path / "mlm", wordpiece_tokenizer, sparse_prediction=True)
    else:
        checkpoint = save_transformers_checkpoint(tmp_path / "bert", wordpiece_tokenizer)
    args = quick_args(tmp_path, model_name_or_path=str(checkpoint), lora=True, merge=True, lora_dropout=0.0,
                      max_steps=8, eval_steps=4, learning_rate=5e-3)
    result = finetune(args, dataset=sentiment_dataset(train=64, validation=16))

    adapter = load_file(result.adapter_dir / "adapter_model.safetensors")
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in adapter.items())  # adapters trained
    assert any(".classifier." in k for k in adapter) and any(".pooler." in k for k in adapter)
    assert not any("lora" in k for k in load_file(result.merged_dir / "model.safetensors"))

    batch = wordpiece_tokenizer(["good great cat", "sad bad day", "the happy king"], padding=True,
                                return_tensors="pt")
    peft_model = load_adapter_model(result.adapter_dir).eval()
    merged = AutoModelForSequenceClassification.from_pretrained(result.merged_dir).eval()
    with torch.no_grad():
        expected = peft_model(**batch).logits
        torch.testing.assert_close(merged(**batch).logits, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(result.model.eval()(**batch).logits, expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(peft_model.merge_and_unload()(**batch).logits, expected, rtol=0, atol=1e-5)
    assert merged.config.model_type == "xfmr-bert"
    assert result.metrics["eval"]["eval_accuracy"] >= 0.0 and "eval_f1" in result.metrics["eval"]


def test_lora_trains_only_adapters_and_head(tmp_path, wordpiece_tokenizer):
    checkpoint = save_mlm_checkpoint(tmp_path / "mlm", wordpiece_tokenizer)
    args = quick_args(tmp_path, model_name_or_path=str(checkpoint), lora=True, max_steps=4, eval_steps=4)
    result = finetune(args, dataset=sentiment_dataset(train=32, validation=8))
    trainable = {n for n, p in result.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "modules_to_save" in n for n in trainable)
    targets = set(result.model.peft_config["default"].target_modules)
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"}
    assert set(result.model.peft_config["default"].modules_to_save) >= {"classifier", "model.pooler.dense"}
    assert result.merged_dir is None and (result.adapter_dir / "config.json").is_file()


def test_finetune_from_sparse_prediction_mlm_checkpoint_tagging(tmp_path, wordpiece_tokenizer):
    """A model pretrained with `sparse_prediction=True` finetunes and evaluates a per-token head."""
    checkpoint = save_mlm_checkpoint(tmp_path / "mlm", wordpiece_tokenizer, sparse_prediction=True)
    data = datasets.DatasetDict({"train": datasets.Dataset.from_list(tagging_rows(160, 0)),
                                 "validation": datasets.Dataset.from_list(tagging_rows(32, 1))})
    args = quick_args(tmp_path, model_name_or_path=str(checkpoint), task="token-classification",
                      learning_rate=3e-3)
    result = finetune(args, dataset=data)
    assert result.model.config.sparse_prediction is True
    assert result.label_names == ["COLOR", "O"]
    metrics = result.metrics["eval"]
    assert {"eval_accuracy", "eval_f1", "eval_macro_f1"} <= set(metrics)
    assert metrics["eval_accuracy"] > 0.9 and metrics["eval_f1"] > 0.8


def test_question_answering_end_to_end(tmp_path, wordpiece_tokenizer):
    """Contexts longer than max_seq_length are windowed; predictions map back to text through offsets."""
    data = datasets.DatasetDict({"train": datasets.Dataset.from_list(qa_rows(160, 0)),
                                 "validation": datasets.Dataset.from_list(qa_rows(24, 1))})
    args = quick_args(tmp_path, task="question-answering", max_seq_length=24, doc_stride=6, max_steps=48,
                      eval_steps=16, learning_rate=3e-3)
    result = finetune(args, dataset=data, tokenizer=wordpiece_tokenizer)
    evals = _eval_logs(result.log_file)
    assert {"eval_exact_match", "eval_f1"} <= set(evals[0])
    assert result.metrics["eval"]["eval_exact_match"] >= 80
    assert evals[-2]["eval_exact_match"] > evals[0]["eval_exact_match"] or evals[0]["eval_exact_match"] >= 80
    assert (result.model_dir / "model.safetensors").is_file()


def test_gradient_accumulation_matches_a_large_batch(tmp_path, wordpiece_tokenizer):
    """Trainer scales the loss right for our heads (they take no **kwargs, so no num_items_in_batch):
    2 x 4 accumulated equals one batch of 8."""
    common = dict(max_steps=1, eval_steps=1, learning_rate=1e-2, weight_decay=0.0)
    data = sentiment_dataset(train=64, validation=8)
    big = finetune(quick_args(tmp_path / "a", per_device_train_batch_size=8, **common), dataset=data,
                   tokenizer=wordpiece_tokenizer)
    accumulated = finetune(quick_args(tmp_path / "b", per_device_train_batch_size=4, gradient_accumulation_steps=2,
                                      **common), dataset=data, tokenizer=wordpiece_tokenizer)
    assert accumulated.trainer.model_accepts_loss_kwargs is False
    # The loss is scale-sensitive (AdamW's first step is not): a missing 1/accumulation factor doubles it.
    assert accumulated.metrics["train"]["train_loss"] == pytest.approx(big.metrics["train"]["train_loss"], abs=1e-5)
    # AdamW's first step is about lr * sign(grad): a gradient summed in another order can move a weight whose
    # gradient is ~0 by a few 1e-7 more (1.07e-6 seen on one of 2,048 weights); a wrong batch would move many by lr.
    for (name, a), (_, b) in zip(big.model.named_parameters(), accumulated.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)


def test_from_scratch_lora_saves_its_base_and_publishes(tmp_path, wordpiece_tokenizer, monkeypatch):
    calls = []
    import importlib

    publishing = importlib.import_module("hf_xfmr.hub.publish")  # the module (hub.publish exports, then uploads)
    real_export = publishing.export

    def export(model, tok, folder, **card):  # the real export, recorded; only the upload is left out
        calls.append(("export", model, folder, card))
        return real_export(model, tok, folder, **card)

    monkeypatch.setattr(publishing, "export", export)
    monkeypatch.setattr(publishing, "upload_export", lambda folder, repo, **_: calls.append(("publish", folder, repo)))
    args = quick_args(tmp_path, lora=True, merge=True, lora_dropout=0.0, max_steps=2, eval_steps=2,
                      push_to_hub="someone/tiny-sentiment")
    result = finetune(args, dataset=sentiment_dataset(train=32, validation=8), tokenizer=wordpiece_tokenizer)
    assert (result.output_dir / "base" / "model.safetensors").is_file()
    # --push_to_hub exports the merged model (not the PEFT wrapper) and uploads that folder.
    assert [c[0] for c in calls] == ["export", "publish"]
    assert calls[0][1] is result.model and type(result.model).__name__ == "XfmrBertForSequenceClassification"
    assert calls[0][2] == calls[1][1] == result.hub_folder and calls[1][2] == "someone/tiny-sentiment"
    card = calls[0][3]
    assert card["training"]["lora"] is True and "eval_dataset" not in card  # local data: no Hub dataset id
    assert card["eval_source"] == "the validation split of a custom dataset" and "license" not in card
    assert card["training_logs"] == str(result.log_file) and card["repo_id"] == "someone/tiny-sentiment"
    accuracy = result.metrics["eval"]["eval_accuracy"]
    assert f"accuracy {accuracy:.4g}" in card["description"]
    assert (result.hub_folder / "config.json").is_file()
    assert f"accuracy {accuracy:.4g}" in (result.hub_folder / "README.md").read_text()
    batch = wordpiece_tokenizer(["good cat", "bad dog"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(load_adapter_model(result.adapter_dir).eval()(**batch).logits,
                                   result.model.eval()(**batch).logits, rtol=0, atol=1e-5)


def test_colors_fixture_is_in_the_test_vocabulary(wordpiece_tokenizer):
    # The tagging and QA tasks rely on colour words being single tokens.
    for color in COLORS:
        assert len(wordpiece_tokenizer.tokenize(color)) == 1
