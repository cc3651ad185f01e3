"""`hf_xfmr.training.pretrain` in one process: objectives end to end, logs, exact resume, NaN handling,
batches without targets, and the errors raised before training starts."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForPreTraining

import hf_xfmr  # noqa: F401
from hf_xfmr.training import (
    NonFiniteLossError,
    PretrainArguments,
    PretrainCallback,
    pretrain,
    read_log,
)
from hf_xfmr.training.logs import TIMING_FIELDS

TRAIN_KEYS = {"step", "epoch", "loss", "learning_rate", "grad_norm", "tokens_per_second", "batches_without_targets",
              "skipped_steps", "flops_per_step", "flops_per_second", "mfu"}


def _args(tokenizer, output_dir, **overrides):
    return PretrainArguments(**{**dict(
        arch="bert", objective="mlm", max_steps=4, max_documents=40, tokenizer=str(tokenizer) if tokenizer else None,
        per_device_train_batch_size=4, max_seq_length=32, logging_steps=1, save_steps=0, eval_fraction=0.1,
        max_eval_examples=16, progress_bar=False, report_to_tensorboard=False, output_dir=str(output_dir)),
        **overrides})


def _losses(path):
    return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in read_log(path)]


class Interrupt(PretrainCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, run, record):
        if record["step"] == self.step:
            raise KeyboardInterrupt


@pytest.mark.slow
@pytest.mark.parametrize("streaming", [False, True], ids=["map-style", "streaming"])
def test_resume_continues_exactly(saved_tokenizer, tmp_path, streaming):
    """Dropout on, 2 micro-batches per step after a batch-size warmup, cosine schedule, evaluation: the
    interrupted-then-resumed run logs the same numbers and ends with the same weights, bit for bit."""
    data = tmp_path / "corpus.jsonl"
    from hf_xfmr.data import default_corpus
    from hf_xfmr.data.corpus import document_text

    data.write_text("".join(json.dumps({"text": document_text(d)}) + "\n" for d in default_corpus(max_documents=40)))
    common = dict(max_steps=8, save_steps=3, eval_steps=4, gradient_accumulation_steps=2, batch_size_warmup_steps=3,
                  lr_scheduler="cosine", warmup_steps=2, dataset=str(data), streaming=streaming, max_documents=None)
    if streaming:
        common.update(eval_dataset=str(data), max_eval_examples=8)
    full = pretrain(_args(saved_tokenizer, tmp_path / "full", **common))
    with pytest.raises(KeyboardInterrupt):
        pretrain(_args(saved_tokenizer, tmp_path / "cut", **common), callbacks=[Interrupt(5)])
    resumed = pretrain(_args(saved_tokenizer, tmp_path / "cut", resume="latest", **common))
    assert _losses(resumed.log_path) == _losses(full.log_path)
    assert len([r for r in read_log(full.log_path) if "eval_loss" in r]) == 2
    assert resumed.final_loss == full.final_loss
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("arch,objective,auto_class", [
    ("bert", "mlm", AutoModelForMaskedLM),
    ("bert", "wwm", AutoModelForMaskedLM),
    ("bert", "mlm+nsp", AutoModelForPreTraining),
    ("roberta", "mlm", AutoModelForMaskedLM),
    ("albert", "mlm+sop", AutoModelForPreTraining),
    ("distilbert", "mlm", AutoModelForMaskedLM),
    ("gpt", "clm", AutoModelForCausalLM),
])
def test_objectives_train_and_save_a_loadable_model(tmp_path, saved_tokenizer, arch, objective, auto_class):
    tokenizer = saved_tokenizer if arch == "bert" else None  # others: their own kind, trained on the fly
    result = pretrain(_args(tokenizer, tmp_path / "out", arch=arch, objective=objective, vocab_size=400))
    records = read_log(result.log_path)
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4] and set(train[0]) == TRAIN_KEYS
    assert all(r["loss"] > 0 and r["grad_norm"] > 0 and r["tokens_per_second"] > 0 for r in train)
    evals = [r for r in records if "eval_loss" in r]
    expected = {"step", "epoch", "eval_loss", "eval_perplexity", "eval_accuracy", "eval_majority_accuracy"}
    if objective in ("mlm+nsp", "mlm+sop"):
        expected.add(f"eval_{objective[-3:]}_accuracy")
    assert len(evals) == 1 and set(evals[0]) == expected
    assert evals[0]["eval_perplexity"] == pytest.approx(torch.tensor(evals[0]["eval_loss"]).exp().item())
    assert 0 <= evals[0]["eval_accuracy"] <= 1 and 0 < evals[0]["eval_majority_accuracy"] < 1

    loaded, info = auto_class.from_pretrained(result.model_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert (result.model_dir / "tokenizer.json").is_file() and (result.model_dir / "model.safetensors").is_file()
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    result.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(input_ids=ids)[0], result.model(input_ids=ids)[0])


class PoisonLoss(PretrainCallback):
    """Makes the training loss NaN on the forward passes numbered in `calls` (1-based)."""

    def __init__(self, calls):
        self.calls, self.count = set(calls), 0

    def on_train_begin(self, run):
        def hook(module, inputs, output):
            if module.training:
                self.count += 1
                if self.count in self.calls:
                    output.loss = output.loss * float("nan")
            return output
        run.unwrapped_model.register_forward_hook(hook)


def test_nan_loss_stops_with_the_step(saved_tokenizer, tmp_path):
    with pytest.raises(NonFiniteLossError, match="not finite .* at step 3 .*--nan_policy skip"):
        pretrain(_args(saved_tokenizer, tmp_path / "out", save_steps=1), callbacks=[PoisonLoss({3})])
    # Nothing after the failing step: the checkpoints of steps 1 and 2 are there, no step 3.
    assert sorted(p.name for p in (tmp_path / "out" / "checkpoints").iterdir()) == ["step_1", "step_2"]


def test_nan_loss_skipped_and_counted(saved_tokenizer, tmp_path):
    result = pretrain(_args(saved_tokenizer, tmp_path / "out", nan_policy="skip", max_steps=5),
                      callbacks=[PoisonLoss({2, 4})])
    assert result.counters["skipped_steps"] == 2
    train = [r for r in read_log(result.log_path) if "loss" in r]
    assert [r["grad_norm"] is None for r in train] == [False, True, False, True, False]
    assert train[-1]["skipped_steps"] == 2
    assert all(torch.isfinite(p).all() for p in result.model.parameters())


class WipeTargets(PretrainCallback):
    """Turns the micro-batches numbered in `calls` (1-based) into batches without any target."""

    def __init__(self, calls):
        self.calls, self.count = set(calls), 0

    def on_micro_batch(self, run, batch):
        self.count += 1
        if self.count in self.calls:
            batch["labels"].fill_(-100)


def test_batches_without_targets_are_counted_not_nan(saved_tokenizer, tmp_path):
    # (The MLM collator always selects a target when it can; other data, or an objective's hook, may not.)
    result = pretrain(_args(saved_tokenizer, tmp_path / "out", max_steps=6, gradient_accumulation_steps=2),
                      callbacks=[WipeTargets({3, 4, 6})])
    assert result.counters["batches_without_targets"] == 3
    train = [r for r in read_log(result.log_path) if "loss" in r]
    # Step 2 had no target at all: no loss to report, yet a (zero-gradient) update and no NaN anywhere.
    assert [r["loss"] is None for r in train] == [False, True, False, False, False, False]
    assert [r["batches_without_targets"] for r in train] == [0, 2, 3, 3, 3, 3]
    assert all(r["grad_norm"] is not None and torch.isfinite(torch.tensor(r["grad_norm"])) for r in train)
    assert all(torch.isfinite(p).all() for p in result.model.parameters())


@pytest.mark.parametrize("overrides,message", [
    (dict(objective="clm"), "'bert' does not pretrain with 'clm'; its objectives are: mlm, wwm, mlm\\+nsp"),
    (dict(arch="gpt9"), "Unknown hf_xfmr architecture 'gpt9'"),
    (dict(per_device_train_batch_size=4000), "only .* example\\(s\\). Lower --per_device_train_batch_size"),
    (dict(max_seq_length=200), "--max_seq_length 200: the model cannot take rows of 200 tokens"),
    (dict(config_overrides="hidden_sise=64"), "XfmrBertConfig has no field\\(s\\) hidden_sise"),
    (dict(config_overrides="hidden_size"), "not of the form field=value"),
])
def test_bad_settings_fail_before_training(saved_tokenizer, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        pretrain(_args(saved_tokenizer, tmp_path / "out", **overrides))
    assert not (tmp_path / "out" / "log.jsonl").exists()


def test_empty_dataset_and_tokenizer_without_mask_token(saved_tokenizer, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        pretrain(_args(saved_tokenizer, tmp_path / "out", dataset=str(empty), max_documents=None))
    from hf_xfmr.data import default_corpus, train_tokenizer

    gpt = tmp_path / "gpt-tokenizer"
    train_tokenizer("gpt", default_corpus(max_documents=10), vocab_size=300).save_pretrained(gpt)
    with pytest.raises(ValueError, match="needs the tokenizer special token\\(s\\) mask_token"):
        pretrain(_args(gpt, tmp_path / "out"))
    assert not (tmp_path / "out" / "log.jsonl").exists()


def test_arguments_validate_and_read_yaml(tmp_path):
    with pytest.raises(ValueError, match="--max_steps must be a positive integer, got 0"):
        PretrainArguments(max_steps=0)
    with pytest.raises(ValueError, match="--batch_size_warmup_steps .* --gradient_accumulation_steps to 2"):
        PretrainArguments(batch_size_warmup_steps=10)
    config = tmp_path / "run.yaml"
    config.write_text("arch: roberta\nmax_steps: 50\nlearning-rate: 0.001\n")
    args = PretrainArguments.from_yaml(config, max_steps=7)
    assert (args.arch, args.max_steps, args.learning_rate) == ("roberta", 7, 0.001)
    config.write_text("arch: roberta\nmax_stepz: 50\n")
    with pytest.raises(ValueError, match="Unknown setting\\(s\\) in .*run.yaml: max_stepz"):
        PretrainArguments.from_yaml(config)


def test_bf16_autocast_trains_and_fp16_needs_a_gpu(saved_tokenizer, tmp_path):
    full = pretrain(_args(saved_tokenizer, tmp_path / "fp32", max_steps=2, eval_fraction=0.0))
    bf16 = pretrain(_args(saved_tokenizer, tmp_path / "bf16", max_steps=2, eval_fraction=0.0, mixed_precision="bf16"))
    # Same data and initialisation; bf16 matmuls round differently but stay close, and weights stay fp32.
    assert bf16.final_loss != full.final_loss and abs(bf16.final_loss - full.final_loss) < 0.05
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="fp16 needs a GPU .* use bf16 on CPU"):
            pretrain(_args(saved_tokenizer, tmp_path / "fp16", mixed_precision="fp16"))


def test_readme_snippets_run(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    import hf_xfmr.training.objectives as table

    readme = (Path(__file__).resolve().parents[2] / "docs" / "pretraining.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    (train,) = [b for b in blocks if "pretrain(PretrainArguments(" in b]
    (register,) = [b for b in blocks if "register_objective(Objective(" in b]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(train.replace("max_steps=2000,", "max_steps=2, max_documents=30, vocab_size=300, max_seq_length=32, "
                       "per_device_train_batch_size=4, save_steps=0, progress_bar=False,"), namespace)
    assert type(namespace["model"]).__name__ == "XfmrBertForMaskedLM"
    assert set(namespace["result"].eval_metrics) == {"eval_loss", "eval_perplexity", "eval_accuracy", "eval_majority_accuracy"}
    monkeypatch.setattr(table, "_OBJECTIVES", dict(table._OBJECTIVES))  # the snippet registers into a copy
    exec(register, {})
    objective = table.get_objective("mlm-40")
    from transformers import AutoTokenizer

    from hf_xfmr.training import ObjectiveSettings

    assert objective.make_collator(AutoTokenizer.from_pretrained(tmp_path / "out" / "bert-wwm"),
                                   ObjectiveSettings()).collator.mlm_probability == 0.4


def _exporting_publish(calls, folder):
    """Stands in for hf_xfmr.hub.publish: does what it does with a model (export it, with the repo id in the
    card) and records the call; only the upload (tested against the test Hub server) is left out."""
    import hf_xfmr.hub

    real_export = hf_xfmr.hub.export

    def publish(model, repo_id, *, tokenizer=None, **export_kwargs):
        calls.append((model, repo_id, tokenizer, export_kwargs))
        return real_export(model, tokenizer, folder, repo_id=repo_id, **export_kwargs)
    return publish


def test_push_to_hub_publishes_the_final_model_with_its_metrics_and_log(saved_tokenizer, tmp_path, monkeypatch):
    import hf_xfmr.hub

    calls = []
    monkeypatch.setattr(hf_xfmr.hub, "publish", _exporting_publish(calls, tmp_path / "export"))
    result = pretrain(_args(saved_tokenizer, tmp_path / "out", max_steps=2, push_to_hub="me/tiny-bert"))
    ((model, repo_id, tokenizer, kwargs),) = calls
    assert model is result.model and repo_id == "me/tiny-bert" and tokenizer is result.tokenizer
    assert kwargs["training"]["steps"] == 2 and kwargs["training"]["objective"] == "mlm"
    assert read_log(kwargs["training_logs"]) == read_log(result.log_path)
    # Evaluated on the embedded corpus (no Hub dataset): the metrics are in the card's text, not its model-index.
    readme = (tmp_path / "export" / "README.md").read_text()
    accuracy = result.eval_metrics["eval_accuracy"]
    assert f"accuracy {accuracy:.4g}" in readme and "majority_accuracy" in readme and "model-index" not in readme
    assert 'from_pretrained("me/tiny-bert", trust_remote_code=True)' in readme
    assert (tmp_path / "export" / "loss_curve.png").is_file()


def test_push_to_hub_puts_metrics_on_a_hub_dataset_into_the_model_index(saved_tokenizer, tmp_path, monkeypatch):
    import hf_xfmr.hub
    from huggingface_hub import ModelCard
    import importlib

    pretrain_module = importlib.import_module("hf_xfmr.training.pretrain")  # the module, not the function

    calls = []
    monkeypatch.setattr(hf_xfmr.hub, "publish", _exporting_publish(calls, tmp_path / "export"))
    finished = pretrain(_args(saved_tokenizer, tmp_path / "out", max_steps=1, eval_fraction=0.0))
    args = _args(saved_tokenizer, tmp_path / "out", dataset="wikitext", push_to_hub="me/tiny-bert")
    pretrain_module.publish(finished.model, finished.tokenizer, args,
                            {"eval_loss": 5.0, "eval_accuracy": 0.25, "eval_perplexity": float("inf")}, finished.log_path)
    data = ModelCard.load(tmp_path / "export" / "README.md").data.to_dict()
    assert data["datasets"] == ["wikitext"]
    (results,) = data["model-index"][0]["results"]
    assert results["dataset"]["name"] == "wikitext" and results["dataset"]["split"] == "train (held-out 10%)"
    assert {m["type"]: m["value"] for m in results["metrics"]} == {"loss": 5.0, "accuracy": 0.25}
