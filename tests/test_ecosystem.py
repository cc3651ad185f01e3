"""Our models inside the Hugging Face ecosystem: pipelines, Trainer, PEFT, Auto classes."""

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForMaskedLM, Trainer, TrainingArguments, pipeline

from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM, XfmrBertForSequenceClassification


def tiny_config(tokenizer, **overrides):
    return XfmrBertConfig.from_preset("tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                      **overrides)


def test_fill_mask_pipeline_runs_on_our_model(wordpiece_tokenizer, tmp_path):
    torch.manual_seed(0)
    model = XfmrBertForMaskedLM(tiny_config(wordpiece_tokenizer)).eval()
    fill = pipeline("fill-mask", model=model, tokenizer=wordpiece_tokenizer, top_k=3)
    predictions = fill("paris is the capital of [MASK].")
    assert len(predictions) == 3
    ids = wordpiece_tokenizer("paris is the capital of [MASK].", return_tensors="pt")
    logits = model(**ids).logits[0, ids["input_ids"][0].tolist().index(wordpiece_tokenizer.mask_token_id)]
    assert predictions[0]["token"] == int(logits.argmax())
    assert predictions[0]["score"] == pytest.approx(float(logits.detach().softmax(-1).max()), rel=1e-4)

    # Saved and reloaded through the Auto class, the pipeline sees the same model.
    model.save_pretrained(tmp_path)
    wordpiece_tokenizer.save_pretrained(tmp_path)
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert type(reloaded) is XfmrBertForMaskedLM
    assert pipeline("fill-mask", model=str(tmp_path), top_k=3)("paris is the capital of [MASK].") == predictions


def test_trainer_fits_sequence_classification(wordpiece_tokenizer, tmp_path):
    """A separable toy task: label 1 iff the sentence mentions 'good'. The training loss must fall."""
    torch.manual_seed(0)
    good = ["the movie was good", "a good story", "good song and good play", "the king was good"]
    bad = ["the movie was bad", "a sad story", "bad song and bad play", "the king was sad"]
    texts = (good + bad) * 8
    labels = ([1] * len(good) + [0] * len(bad)) * 8
    data = Dataset.from_dict({"text": texts, "label": labels}).map(
        lambda batch: wordpiece_tokenizer(batch["text"], padding="max_length", max_length=12), batched=True
    ).remove_columns("text")
    model = XfmrBertForSequenceClassification(tiny_config(wordpiece_tokenizer, num_labels=2))
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=6, learning_rate=3e-3,
        logging_steps=4, save_strategy="no", report_to=[], use_cpu=True, seed=0, disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) >= 4
    assert losses[-1] < 0.5 * losses[0], losses
    model.eval()
    batch = wordpiece_tokenizer(["good good movie", "bad sad movie"], return_tensors="pt", padding=True)
    assert model(**batch).logits.argmax(-1).tolist() == [1, 0]


def test_lora_adapts_only_adapters_and_the_classifier(wordpiece_tokenizer, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(0)
    base = XfmrBertForSequenceClassification(tiny_config(wordpiece_tokenizer, num_labels=2))
    base_weights = {k: v.clone() for k, v in base.state_dict().items()}
    lora = get_peft_model(base, LoraConfig(task_type="SEQ_CLS", r=4, target_modules=["q_proj", "v_proj"]))
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "classifier" in n for n in trainable)
    assert any("classifier" in n for n in trainable)
    batch = wordpiece_tokenizer(["a good movie"], return_tensors="pt")
    with torch.no_grad():
        for n, p in lora.named_parameters():
            if "lora_B" in n:
                p.normal_()  # make the adapter do something
    lora.eval()
    expected = lora(**batch).logits
    lora.save_pretrained(tmp_path)
    fresh = XfmrBertForSequenceClassification(tiny_config(wordpiece_tokenizer, num_labels=2))
    fresh.load_state_dict(base_weights)
    reloaded = PeftModel.from_pretrained(fresh, tmp_path).eval()
    torch.testing.assert_close(reloaded(**batch).logits, expected, atol=1e-6, rtol=1e-5)
    merged = reloaded.merge_and_unload()
    torch.testing.assert_close(merged(**batch).logits, expected, atol=1e-5, rtol=1e-5)


def test_trainer_pretrains_mlm_with_our_whole_word_collator(wordpiece_tokenizer, tmp_path):
    """Trainer + DataCollatorForMLM (whole words, needs the word_ids column) + sparse prediction."""
    from hf_xfmr.data import DataCollatorForMLM, tokenize_for_mlm

    torch.manual_seed(0)
    sentences = ["the cat and the dog", "paris is the capital of france", "london is the capital of england",
                 "the king and the queen", "a happy child and a sad child"] * 8
    data = Dataset.from_dict(tokenize_for_mlm(wordpiece_tokenizer, sentences, max_length=16))
    assert "word_ids" in data.column_names
    collator = DataCollatorForMLM(wordpiece_tokenizer, mlm_probability=0.3, whole_word_mask=True, seed=0)
    model = XfmrBertForMaskedLM(tiny_config(wordpiece_tokenizer, sparse_prediction=True))
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=8, learning_rate=3e-3,
        logging_steps=5, save_strategy="no", report_to=[], use_cpu=True, seed=0, disable_tqdm=True,
        remove_unused_columns=False,  # keep `word_ids` for whole-word masking
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) >= 6
    assert losses[-1] < 0.7 * losses[0], losses
