"""`hf-xfmr pretrain --arch electra --objective rtd`: the options reach the config, the log carries both losses
and the accuracies, the output folder holds an ordinary discriminator (and the generator in generator/), a
resumed run ends bit for bit where the uninterrupted one does, evaluation leaves training unchanged, packed and
streamed data train, and options of another objective are refused."""

import dataclasses
import json
import math
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoModelForSequenceClassification

import hf_xfmr  # noqa: F401
from hf_xfmr.data import default_corpus
from hf_xfmr.data.corpus import document_text
from hf_xfmr.models import registry
from hf_xfmr.training import PretrainArguments, PretrainCallback, pretrain, read_log
from hf_xfmr.training.logs import TIMING_FIELDS

TERMS = ("generator_loss", "discriminator_loss", "generator_accuracy", "replaced_accuracy", "original_accuracy")


@pytest.fixture(autouse=True)
def electra_trains_rtd(monkeypatch):
    """The electra architecture with "rtd" among its objectives (a no-op once the registry lists it)."""
    arch = registry.get_architecture("electra")
    if "rtd" not in arch.objectives:
        monkeypatch.setitem(registry.OBJECTIVES, "rtd", "replaced-token detection (ELECTRA)")
        monkeypatch.setitem(registry._ARCHITECTURES, "electra",
                            dataclasses.replace(arch, objectives=arch.objectives + ("rtd",)))


pytestmark = pytest.mark.usefixtures("one_thread")  # every test: tests/training/conftest.py


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("rtd") / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": document_text(d)}) + "\n" for d in default_corpus(max_documents=40)))
    return path


def _args(tokenizer, out, **overrides):
    settings = dict(arch="electra", objective="rtd", tokenizer=str(tokenizer), max_steps=4, max_seq_length=32,
                    per_device_train_batch_size=4, logging_steps=1, save_steps=0, eval_fraction=0.1,
                    max_eval_examples=8, progress_bar=False, report_to_tensorboard=False, output_dir=str(out),
                    max_documents=40)
    return PretrainArguments(**{**settings, **overrides})


def test_rtd_trains_logs_its_terms_and_saves_an_ordinary_discriminator(saved_tokenizer, tmp_path):
    out = tmp_path / "out"
    result = pretrain(_args(saved_tokenizer, out, generator_size_ratio=0.5, discriminator_loss_weight=20.0))
    model = result.model
    assert type(model).__name__ == "XfmrElectraForReplacedTokenDetection"
    config = model.config
    assert (config.generator_size_ratio, config.generator_loss_weight, config.discriminator_loss_weight) == \
        (0.5, 1.0, 20.0)
    assert model.generator.config.hidden_size == config.hidden_size // 2

    steps = [r for r in read_log(result.log_path) if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    for record in steps:  # one micro-batch per step: the loss is the weighted sum of the two terms
        assert all(name in record for name in TERMS), record
        assert record["loss"] == pytest.approx(record["generator_loss"] + 20.0 * record["discriminator_loss"],
                                               rel=1e-5)
        assert 0.0 <= record["generator_accuracy"] <= 1.0 and 0.0 <= record["original_accuracy"] <= 1.0
    metrics = result.eval_metrics
    assert {"eval_loss", "eval_accuracy", "eval_replaced_accuracy", "eval_original_accuracy"} <= set(metrics)
    assert "eval_perplexity" not in metrics  # the loss is 1 x MLM + 20 x binary: no perplexity stands for it

    # The discriminator is an ordinary ForPreTraining checkpoint, the generator a ForMaskedLM one.
    discriminator = AutoModelForPreTraining.from_pretrained(out)
    assert type(discriminator).__name__ == "XfmrElectraForPreTraining"
    classifier, info = AutoModelForSequenceClassification.from_pretrained(out, num_labels=3,
                                                                          output_loading_info=True)
    assert type(classifier).__name__ == "XfmrElectraForSequenceClassification"
    assert not [k for k in info["missing_keys"] if not k.startswith("classifier")]
    generator = AutoModelForMaskedLM.from_pretrained(out / "generator")
    for part, loaded in ((model.discriminator, discriminator), (model.generator, generator)):
        reference = part.state_dict()
        for name, value in loaded.state_dict().items():
            torch.testing.assert_close(value, reference[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("streaming", [False, True], ids=["map-style", "streaming"])
def test_rtd_resume_continues_exactly(saved_tokenizer, corpus_file, tmp_path, streaming):
    """Two micro-batches per step, evaluation and a checkpoint at step 3: resuming that checkpoint ends with the
    uninterrupted run's log and weights (the samples come from the restored RNG)."""
    common = dict(max_steps=6, save_steps=3, eval_steps=2, gradient_accumulation_steps=2, dataset=str(corpus_file),
                  streaming=streaming, max_documents=None, save_total_limit=None)
    if streaming:
        common.update(eval_dataset=str(corpus_file))
    full = pretrain(_args(saved_tokenizer, tmp_path / "full", **common))
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step_3", resumed_dir / "checkpoints" / "step_3")
    resumed = pretrain(_args(saved_tokenizer, resumed_dir, resume="latest", **common))

    def after_step_3(path):  # every logged number but the throughput
        return [{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in read_log(path) if r["step"] > 3]
    expected = after_step_3(full.log_path)
    assert after_step_3(resumed.log_path) == expected
    assert len([r for r in expected if "loss" in r]) == 3 and len([r for r in expected if "eval_loss" in r]) == 2
    for name in ("model.safetensors", "generator/model.safetensors"):
        a, b = load_file(str(tmp_path / "full" / name)), load_file(str(resumed_dir / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_evaluation_does_not_change_the_training_run(saved_tokenizer, tmp_path):
    """The generator samples from torch's RNG: evaluating (which samples too) must not shift training's stream."""
    quiet = pretrain(_args(saved_tokenizer, tmp_path / "quiet"))  # evaluates once, after the last step
    evaluated = pretrain(_args(saved_tokenizer, tmp_path / "evaluated", eval_steps=1))
    assert len([r for r in read_log(quiet.log_path) if "eval_loss" in r]) == 1
    assert len([r for r in read_log(evaluated.log_path) if "eval_loss" in r]) == 4
    a, b = quiet.model.state_dict(), evaluated.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


class _Batches(PretrainCallback):
    def __init__(self):
        self.batches = []

    def on_micro_batch(self, run, batch):
        self.batches.append(batch)


def test_rtd_trains_on_packed_rows(saved_tokenizer, tmp_path):
    seen = _Batches()
    corpus = tmp_path / "short.txt"  # one short document per line: many windows share a row
    texts = [document_text(d) for d in default_corpus(max_documents=30)]
    corpus.write_text("\n".join(" ".join(t.split()[:12]) for t in texts * 4) + "\n")
    result = pretrain(_args(saved_tokenizer, tmp_path / "out", packing=True, dataset=str(corpus), max_seq_length=64,
                            max_steps=2, max_documents=None), callbacks=[seen])
    assert all("cu_seqlens" in batch for batch in seen.batches)
    assert any(len(batch["cu_seqlens"]) - 1 > batch["input_ids"].shape[0] for batch in seen.batches)
    steps = [r for r in read_log(result.log_path) if "loss" in r]
    assert len(steps) == 2 and all(math.isfinite(r["loss"]) and math.isfinite(r["discriminator_loss"])
                                   for r in steps)


@pytest.mark.parametrize("overrides,message", [
    (dict(objective="mlm", generator_size_ratio=0.5), "--generator_size_ratio only apply to an objective"),
    (dict(arch="bert", objective="mlm", discriminator_loss_weight=10.0), "--discriminator_loss_weight only apply"),
])
def test_rtd_options_with_another_objective_are_refused(saved_tokenizer, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        pretrain(_args(saved_tokenizer, tmp_path / "out", **overrides))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field,value,message", [
    ("generator_size_ratio", 0.0, "must be in \\(0, 1\\]"),
    ("generator_size_ratio", 1.5, "must be in \\(0, 1\\]"),
    ("discriminator_loss_weight", -1.0, "must be >= 0"),
    ("discriminator_mlm_weight", -1.0, "must be >= 0"),
])
def test_bad_rtd_options_name_the_option(field, value, message):
    with pytest.raises(ValueError, match=f"--{field} {message}"):
        PretrainArguments(arch="electra", objective="rtd", **{field: value})


def test_the_discriminator_mlm_option_reaches_the_model_and_stays_out_of_the_export(saved_tokenizer, tmp_path):
    out = tmp_path / "out"
    result = pretrain(_args(saved_tokenizer, out, discriminator_mlm_weight=2.0, max_steps=2))
    assert result.model.config.discriminator_mlm_weight == 2.0
    assert hasattr(result.model, "discriminator_lm_head")
    saved = load_file(out / "model.safetensors")  # the final export: the discriminator alone
    assert saved and not any("lm_head" in name for name in saved)


def test_continuing_from_a_checkpoint_takes_the_loss_weights_and_keeps_the_generator(saved_tokenizer, tmp_path):
    """--model_path: the loss weights given apply to the loaded pair; a generator width it does not have is
    refused (a trained generator keeps its width)."""
    first = tmp_path / "first"
    pretrain(_args(saved_tokenizer, first, generator_size_ratio=0.5, max_steps=2, eval_fraction=0.0))
    second = tmp_path / "second"
    pretrain(_args(saved_tokenizer, second, model_path=str(first), discriminator_loss_weight=7.0, max_steps=2,
                   eval_fraction=0.0))
    config = json.loads((second / "config.json").read_text())
    assert config["discriminator_loss_weight"] == 7.0
    assert config["generator_size_ratio"] == 0.5
    with pytest.raises(ValueError, match="a trained generator keeps its width"):
        pretrain(_args(saved_tokenizer, tmp_path / "third", model_path=str(first), generator_size_ratio=0.25,
                       max_steps=1, eval_fraction=0.0))
