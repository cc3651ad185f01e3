"""Tiny data, checkpoints and options shared by the finetuning tests (no network, seconds per run)."""

import random

import datasets
import pytest
import torch
import transformers

from hf_xfmr.models.bert import XfmrBertConfig, XfmrBertForMaskedLM
from hf_xfmr.training.finetune import FinetuneArguments

POSITIVE = ("good", "great", "happy")
NEGATIVE = ("bad", "sad", "small")
COLORS = ("red", "blue", "green")
FILLER = ("the", "cat", "dog", "house", "river", "city", "man", "woman", "sun", "moon", "day", "king")
TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
TINY_OVERRIDES = ",".join(f"{k}={v}" for k, v in TINY_BERT.items())


@pytest.fixture(autouse=True)
def one_thread(one_thread):
    """The suite's `one_thread` (tests/conftest.py), for every test of a module that imports this."""
    yield


def sentiment_rows(n: int, seed: int) -> list[dict]:
    """Separable two-class rows: every word of a text carries its class."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randint(0, 1)
        words = [rng.choice(POSITIVE if label else NEGATIVE) for _ in range(rng.randint(2, 5))]
        rows.append({"text": " ".join(words), "label": ["negative", "positive"][label]})
    return rows


def sentiment_dataset(train=192, validation=48, test=0) -> datasets.DatasetDict:
    splits = {"train": sentiment_rows(train, 0), "validation": sentiment_rows(validation, 1)}
    if test:
        splits["test"] = sentiment_rows(test, 2)
    return datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()})


def tagging_rows(n: int, seed: int) -> list[dict]:
    """Words with a tag: COLOR for colour words, O otherwise."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice(FILLER + COLORS) for _ in range(rng.randint(3, 8))]
        rows.append({"tokens": words, "tags": ["COLOR" if w in COLORS else "O" for w in words]})
    return rows


def qa_rows(n: int, seed: int, words: int = 24) -> list[dict]:
    """A long context of filler words with one colour word somewhere; the answer is that colour."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        context_words = [rng.choice(FILLER) for _ in range(words)]
        color = rng.choice(COLORS)
        context_words[rng.randrange(words)] = color
        context = " ".join(context_words)
        start = context.index(color) if context.startswith(color) else context.index(" " + color) + 1
        rows.append({"id": str(i), "question": "what is the color ?", "context": context,
                     "answers": {"text": [color], "answer_start": [start]}})
    return rows


def quick_args(tmp_path, **overrides) -> FinetuneArguments:
    """Options for a run of a few seconds on the CPU (no trackers, no workers, no progress bars)."""
    options = dict(
        output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", dataloader_num_workers=0,
        disable_tqdm=True, max_steps=24, eval_steps=8, logging_steps=4, per_device_train_batch_size=16,
        learning_rate=2e-3, warmup_steps=0, max_seq_length=32, seed=0, dataset="unused",
    )
    options.update(overrides)
    if "model_name_or_path" not in options:
        options.setdefault("arch", "bert")
        options.setdefault("config_overrides", TINY_OVERRIDES)
    return FinetuneArguments(**options)


def vocab_size(tokenizer) -> int:
    # max id + 1: the shared test tokenizer lists "a" twice (a word and a letter), so ids have a gap.
    return max(tokenizer.get_vocab().values()) + 1


def save_mlm_checkpoint(path, tokenizer, *, sparse_prediction: bool = True, seed: int = 0):
    """A tiny XfmrBertForMaskedLM after one MLM step (sparse prediction on, as pretraining would run it),
    saved with its tokenizer."""
    torch.manual_seed(seed)
    config = XfmrBertConfig(vocab_size=vocab_size(tokenizer), sparse_prediction=sparse_prediction,
                            pad_token_id=tokenizer.pad_token_id, **TINY_BERT)
    model = XfmrBertForMaskedLM(config)
    batch = tokenizer(["the good cat", "a bad dog is sad"], padding=True, return_tensors="pt")
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, 2] = batch["input_ids"][:, 2]
    loss = model(**batch, labels=labels).loss
    loss.backward()
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def save_transformers_checkpoint(path, tokenizer, seed: int = 0):
    """A tiny transformers BertForMaskedLM folder with the tokenizer."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=vocab_size(tokenizer), **TINY_BERT)
    transformers.BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
