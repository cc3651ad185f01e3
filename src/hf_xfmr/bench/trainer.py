"""End to end: one epoch of Trainer finetuning on the VADER sentences, transformers' model against ours.

What a user of transformers runs: a tokenizer, `DataCollatorWithPadding` (dynamic padding to the longest
row of each batch), `Trainer` for one epoch, then accuracy on the held-out test split. The reference is
`<Arch>ForSequenceClassification` in sdpa with random weights (the machine is offline, so no pretrained
checkpoint); ours is `hf_xfmr.from_transformers` of that same model before any training, in its default
configuration. Both train with the same seed, data order and hyperparameters; only the model differs.

Wall-clock covers `trainer.train()` alone (tokenization and model building are excluded). The two runs
cannot interleave step by step as the model cases do: with `rounds` > 1 they alternate whole epochs
(ours, ref, ours, ref, ...) and the median is reported. Accuracies differ by training noise only: the
dropout masks come from different generators.

Command line: `hf-xfmr bench --cases trainer-vader` (or `--tiny` for a smoke run on a few hundred rows).
"""

import statistics
import tempfile
import time

import torch

from .harness import table_lines, torch_threads

SIZES = dict(hidden=256, layers=4, heads=4, ffn=1024, vocab_size=8000, max_length=128, batch_size=32,
             learning_rate=1e-4, max_train_rows=None, max_test_rows=None)
TINY_SIZES = dict(hidden=32, layers=2, heads=2, ffn=64, vocab_size=200, max_length=48, batch_size=16,
                  learning_rate=1e-3, max_train_rows=256, max_test_rows=128)


def _data(vocab_size: int, max_length: int, max_train_rows, max_test_rows, seed: int):
    """(tokenizer, tokenized train split, tokenized test split) of the 2-class VADER sentences."""
    from ..data.labelled import load_vader_sentiment
    from ..data.tokenizers import train_tokenizer

    splits = load_vader_sentiment(seed=seed)
    train, test = splits["train"], splits["test"]
    if max_train_rows is not None:
        train = train.select(range(min(max_train_rows, len(train))))
    if max_test_rows is not None:
        test = test.select(range(min(max_test_rows, len(test))))
    tokenizer = train_tokenizer("bert", corpus=list(train["text"]), vocab_size=vocab_size)

    def tokenize(batch):
        return tokenizer(batch["text"], truncation=True, max_length=max_length)

    columns = [c for c in train.column_names if c != "label"]
    train = train.map(tokenize, batched=True, remove_columns=columns)
    test = test.map(tokenize, batched=True, remove_columns=columns)
    return tokenizer, train.rename_column("label", "labels"), test.rename_column("label", "labels")


def _train_one(model, tokenizer, train, test, *, batch_size: int, learning_rate: float, seed: int) -> dict:
    """One epoch of Trainer on `model`: {"seconds": wall-clock of train(), "accuracy": test accuracy}."""
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, num_train_epochs=1, per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=64, learning_rate=learning_rate, warmup_steps=0.1, seed=seed,
            data_seed=seed, save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True,
            disable_tqdm=True, logging_strategy="no", dataloader_num_workers=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=train,
                          data_collator=DataCollatorWithPadding(tokenizer))
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        predictions = trainer.predict(test)
    accuracy = float((predictions.predictions.argmax(-1) == predictions.label_ids).mean())
    return {"seconds": seconds, "accuracy": accuracy}


def trainer_epoch(*, hidden: int, layers: int, heads: int, ffn: int, vocab_size: int, max_length: int,
                  batch_size: int, learning_rate: float, max_train_rows=None, max_test_rows=None,
                  rounds: int = 1, seed: int = 0, num_threads: int | None = None) -> dict:
    """Finetune transformers' BERT and ours (same initial weights) for one epoch each on VADER.

    Returns {"case", "ours_s", "ref_s", "ratio" (ref / ours wall-clock), "ours_accuracy", "ref_accuracy",
    "train_rows", "test_rows", "description"}; times are medians over `rounds` alternating epochs,
    accuracies those of the first round.
    """
    import transformers

    import hf_xfmr

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    with torch_threads(num_threads):
        tokenizer, train, test = _data(vocab_size, max_length, max_train_rows, max_test_rows, seed)
        config = transformers.BertConfig(
            vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=ffn, max_position_embeddings=max(512, max_length), num_labels=2,
            pad_token_id=tokenizer.pad_token_id,
        )
        times = {"ours": [], "ref": []}
        accuracy = {}
        for _ in range(rounds):
            torch.manual_seed(seed)
            ref = transformers.BertForSequenceClassification._from_config(config, attn_implementation="sdpa")
            models = {"ours": hf_xfmr.from_transformers(ref), "ref": ref}  # identical initial weights
            for side, model in models.items():
                result = _train_one(model, tokenizer, train, test, batch_size=batch_size,
                                    learning_rate=learning_rate, seed=seed)
                times[side].append(result["seconds"])
                accuracy.setdefault(side, result["accuracy"])
            del models, ref
    ours_s, ref_s = statistics.median(times["ours"]), statistics.median(times["ref"])
    return {
        "case": "trainer-vader", "ours_s": ours_s, "ref_s": ref_s, "ratio": ref_s / ours_s,
        "ours_accuracy": accuracy["ours"], "ref_accuracy": accuracy["ref"],
        "train_rows": len(train), "test_rows": len(test),
        "description": (f"Trainer, 1 epoch, BertForSequenceClassification (sdpa) hidden {hidden}, {layers} layers, "
                        f"random init, WordPiece {len(tokenizer)}, DataCollatorWithPadding, batch {batch_size}, "
                        f"lr {learning_rate}, max_length {max_length}; {rounds} round(s)"),
    }


def markdown_table(rows: list[dict]) -> str:
    """The rows of `trainer_epoch` as a markdown table, with a legend."""
    lines = table_lines(
        ["case", "ours s", "ref s", "speed ratio", "ours test acc", "ref test acc", "train rows"], "lrrrrrr",
        [[r["case"], f"{r['ours_s']:.1f}", f"{r['ref_s']:.1f}", f"{r['ratio']:.2f}x", f"{100 * r['ours_accuracy']:.1f}%",
          f"{100 * r['ref_accuracy']:.1f}%", r["train_rows"]] for r in rows])
    lines.append("")
    lines.append("s: wall-clock of one `trainer.train()` epoch. speed ratio = ref / ours (> 1: ours faster).")
    return "\n".join(lines)
