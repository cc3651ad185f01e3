"""Encoder-decoder pretraining through `pretrain`: an objective whose task is "seq2seq-lm" trains the
architecture's ForConditionalGeneration on (input, target) batches, evaluates on the unshifted labels, and
checks a full-length input AND target before training. Uses a fake "first half of the window" objective on
T5 so the plumbing is tested apart from any real collator."""

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

import hf_xfmr  # noqa: F401
from hf_xfmr.models import registry
from hf_xfmr.models.t5 import XfmrT5Config, XfmrT5ForConditionalGeneration
from hf_xfmr.training import PretrainArguments, pretrain, read_log
from hf_xfmr.training import objectives as objectives_module
from hf_xfmr.training.objectives import Objective, chunk_documents


def _collator(tokenizer, settings):
    """Encoder: the window; targets: its first half (padded with -100); decoder inputs come from the model."""
    def collate(examples, generator=None):
        half = settings.max_seq_length // 2
        length = max(len(e["input_ids"]) for e in examples)
        ids = torch.full((len(examples), length), tokenizer.pad_token_id)
        mask = torch.zeros_like(ids)
        labels = torch.full((len(examples), half), -100)
        for row, example in enumerate(examples):
            tokens = torch.tensor(example["input_ids"])
            ids[row, :len(tokens)], mask[row, :len(tokens)] = tokens, 1
            target = tokens[:half]
            labels[row, :len(target)] = target
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}
    return collate


@pytest.fixture
def seq2seq_architecture(monkeypatch):
    monkeypatch.setitem(registry.OBJECTIVES, "test-half", "fake seq2seq objective")
    objective = Objective(name="test-half", description="first half of the window", task="seq2seq-lm",
                          build_examples=chunk_documents, make_collator=_collator, required_tokens=("pad_token",),
                          decoder_length=lambda settings: settings.max_seq_length // 2)
    monkeypatch.setitem(objectives_module._OBJECTIVES, "test-half", objective)
    arch = registry.Architecture(name="t5-half", config_class=XfmrT5Config,
                                 classes={"seq2seq-lm": XfmrT5ForConditionalGeneration}, objectives=("test-half",))
    monkeypatch.setitem(registry._ARCHITECTURES, "t5-half", arch)
    return objective


def _args(tokenizer, output_dir, **overrides):
    return PretrainArguments(**{**dict(
        arch="t5-half", max_steps=3, max_documents=40, tokenizer=str(tokenizer), preset="tiny",
        per_device_train_batch_size=4, max_seq_length=24, logging_steps=1, save_steps=0, eval_fraction=0.1,
        max_eval_examples=8, progress_bar=False, report_to_tensorboard=False, output_dir=str(output_dir)),
        **overrides})


def test_seq2seq_objective_trains_evaluates_and_saves(seq2seq_architecture, saved_tokenizer, tmp_path):
    assert seq2seq_architecture.seq2seq
    result = pretrain(_args(saved_tokenizer, tmp_path / "out"))
    records = read_log(result.log_path)
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all(r["loss"] > 0 and r["grad_norm"] > 0 for r in train)
    evals = [r for r in records if "eval_loss" in r]
    assert len(evals) == 1 and 0 <= evals[0]["eval_accuracy"] <= 1
    assert type(result.model).__name__ == "XfmrT5ForConditionalGeneration"
    loaded = AutoModelForSeq2SeqLM.from_pretrained(result.model_dir).eval()
    ids = torch.tensor([[5, 10, 11, 12, 3]])
    labels = torch.tensor([[10, 11, 12]])
    result.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids, labels=labels).logits,
                                   result.model(input_ids=ids, labels=labels).logits)


def test_length_check_covers_the_decoder(seq2seq_architecture, saved_tokenizer, tmp_path, monkeypatch):
    """A decoder that cannot take the objective's target length fails before training, naming both lengths."""
    seen = []
    original = XfmrT5ForConditionalGeneration.forward

    def spy(self, *args, **kwargs):
        if kwargs.get("decoder_input_ids") is not None and not self.training:
            seen.append((kwargs["input_ids"].shape[1], kwargs["decoder_input_ids"].shape[1]))
            if kwargs["decoder_input_ids"].shape[1] > 10:
                raise IndexError("decoder too short")
        return original(self, *args, **kwargs)
    monkeypatch.setattr(XfmrT5ForConditionalGeneration, "forward", spy)
    with pytest.raises(ValueError, match="24 input tokens and 12 target tokens"):
        pretrain(_args(saved_tokenizer, tmp_path / "out"))
    assert seen[0] == (24, 12)


def test_t5_span_corruption_trains_and_saves_a_loadable_model(tmp_path):
    """`--arch t5` (default objective span-corruption) with a T5 tokenizer trained on the fly."""
    result = pretrain(PretrainArguments(
        arch="t5", max_steps=3, max_documents=40, vocab_size=400, preset="tiny", per_device_train_batch_size=4,
        max_seq_length=32, logging_steps=1, save_steps=0, eval_fraction=0.1, max_eval_examples=8,
        progress_bar=False, report_to_tensorboard=False, output_dir=str(tmp_path / "out")))
    records = read_log(result.log_path)
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3]
    evals = [r for r in records if "eval_loss" in r]
    assert len(evals) == 1 and 0 < evals[0]["eval_majority_accuracy"] < 1
    model = result.model
    assert type(model).__name__ == "XfmrT5ForConditionalGeneration"
    assert model.config.vocab_size == 400 and model.config.decoder_start_token_id == model.config.pad_token_id
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(result.model_dir)
    assert tokenizer.convert_ids_to_tokens(len(tokenizer) - 1) == "<extra_id_0>"
    loaded = AutoModelForSeq2SeqLM.from_pretrained(result.model_dir).eval()
    ids = tokenizer(["the cat <extra_id_0> on the mat"], return_tensors="pt").input_ids
    model.eval()
    generated = loaded.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert torch.equal(generated, model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False))


def test_bart_text_infilling_trains_and_saves_a_loadable_model(tmp_path):
    """`--arch bart` (default objective text-infilling) with a BART (byte-level BPE) tokenizer trained on the fly."""
    result = pretrain(PretrainArguments(
        arch="bart", max_steps=3, max_documents=40, vocab_size=400, preset="tiny", per_device_train_batch_size=4,
        max_seq_length=32, logging_steps=1, save_steps=0, eval_fraction=0.1, max_eval_examples=8,
        progress_bar=False, report_to_tensorboard=False, output_dir=str(tmp_path / "out")))
    records = read_log(result.log_path)
    train = [r for r in records if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3] and all(r["loss"] > 0 for r in train)
    evals = [r for r in records if "eval_loss" in r]
    assert len(evals) == 1 and 0 <= evals[0]["eval_accuracy"] <= 1
    model = result.model
    assert type(model).__name__ == "XfmrBartForConditionalGeneration"
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(result.model_dir)
    assert model.config.vocab_size == len(tokenizer) == 400
    assert (model.config.pad_token_id, model.config.eos_token_id) == (tokenizer.pad_token_id, tokenizer.eos_token_id)
    assert model.config.decoder_start_token_id == tokenizer.eos_token_id
    loaded = AutoModelForSeq2SeqLM.from_pretrained(result.model_dir).eval()
    ids = tokenizer(["the cat <mask> on the mat"], return_tensors="pt").input_ids
    assert tokenizer.mask_token_id in ids[0].tolist()
    model.eval()
    generated = loaded.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    assert torch.equal(generated, model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False))
