"""`make demo`: the whole product, offline, on a CPU, in a few minutes. Everything goes under demo_output/.

1. data: the embedded corpus (Python's own documentation) plus the unlabelled training sentences of the
   VADER sentiment set (domain text for the finetuning task; its validation and test sentences are never seen);
2. tokenizers: one per architecture, trained on that pretraining text with that architecture's special tokens;
3. pretraining with `hf_xfmr.training.pretrain` (the loop behind `hf-xfmr pretrain`) of each
   `--runs` architecture with its objective (by default `DEFAULT_RUNS`: a small ModernBERT with masked language
   modelling and a small XLNet with permutation language modelling), each with a progress bar and a
   falling loss; held-out accuracy on the predicted tokens against the accuracy of always guessing the
   most frequent one;
4. LoRA finetuning with `hf_xfmr.training.finetune` (Trainer + PEFT, behind `hf-xfmr finetune`) of the
   first pretrained model on VADER sentiment (positive / negative), test accuracy against the
   majority class; the adapter and the merged model are saved. The same model with random weights is
   finetuned the same way (same LoRA, steps and seed): the floor that says what pretraining added;
5. a Hub-ready export of the finetuned model (`hf_xfmr.hub.export`): self-contained remote code,
   safetensors, a model card with YAML front matter and a PNG of the loss curves, reloaded through
   `AutoModelForSequenceClassification(trust_remote_code=True)` from the folder to check it.

Run `python examples/demo.py --help` for the options (fewer steps, other architectures).
"""

import argparse
import json
import math
import shutil
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from hf_xfmr.data import default_corpus, train_tokenizer
from hf_xfmr.data.corpus import document_text
from hf_xfmr.data.labelled import load_vader_sentiment, vader_unlabelled_text
from hf_xfmr.training import read_log
from hf_xfmr.hub import export
from hf_xfmr.models import get_architecture
from hf_xfmr.training import FinetuneArguments, PretrainArguments, finetune, pretrain
from hf_xfmr.training.finetune import lora_targets

SENTENCES_PER_DOCUMENT = 20  # VADER sentences are grouped into pseudo-documents of this many
# Small enough for a CPU, large enough to learn something in a few hundred steps (the "tiny" presets are for tests).
DEMO_SIZES = {
    "xlnet": dict(d_model=128, n_layer=2, n_head=4, d_inner=512),
    "gpt": dict(n_embd=128, n_layer=2, n_head=4, n_inner=512),
    "distilbert": dict(dim=128, n_layers=2, n_heads=4, hidden_dim=512),
}
DEFAULT_SIZE = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)
# What `make demo` pretrains, as architecture:objective; the first one is finetuned and exported. Add a run
# here (and a size above if its config names the fields differently) to show another architecture.
DEFAULT_RUNS = ["modernbert:mlm", "xlnet:plm"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS),
                        help="architecture:objective pairs to pretrain, comma-separated; the first one is finetuned "
                             "and exported (default: %(default)s)")
    parser.add_argument("--pretrain-steps", type=int, default=400, help="optimizer steps per pretraining run")
    parser.add_argument("--finetune-epochs", type=float, default=1.0, help="passes over the sentiment training set")
    parser.add_argument("--vocab-size", type=int, default=4000, help="vocabulary size of each tokenizer")
    parser.add_argument("--output", type=Path, default=Path("demo_output"), help="where everything is written")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="a few steps of everything, to check that the pipeline runs (results are meaningless "
                             "and the quality checks are skipped)")
    args = parser.parse_args(argv)
    if args.quick:
        args.pretrain_steps, args.finetune_epochs, args.vocab_size = 8, 0.02, 600
    return args


def parse_runs(text: str) -> list[tuple[str, str]]:
    runs = []
    for item in text.split(","):
        arch, sep, objective = item.strip().partition(":")
        if not sep or not arch or not objective:
            raise SystemExit(f"demo: --runs item {item!r} is not architecture:objective (e.g. modernbert:mlm)")
        entry = get_architecture(arch)  # raises with the known names
        if objective not in entry.objectives:
            raise SystemExit(f"demo: {arch} does not train with {objective!r}; it supports {', '.join(entry.objectives)}")
        runs.append((arch, objective))
    return runs


def pretraining_text(sentences: list[str]) -> list[str]:
    """The embedded corpus plus `sentences` (unlabelled VADER sentences) grouped into documents."""
    documents = [document_text(doc) for doc in default_corpus()]
    documents += ["\n".join(sentences[i:i + SENTENCES_PER_DOCUMENT])
                  for i in range(0, len(sentences), SENTENCES_PER_DOCUMENT)]
    return documents


def write_pretraining_text(path: Path, documents: list[str]) -> None:
    """One JSON document per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for text in documents:
            f.write(json.dumps({"text": text}) + "\n")


def random_init_copy(model, tokenizer_dir: Path, folder: Path, seed: int) -> Path:
    """`model`'s architecture and config with fresh random weights (seeded), saved with the tokenizer of
    `tokenizer_dir`: a checkpoint to finetune from scratch exactly as the pretrained one is."""
    torch.manual_seed(seed)
    type(model)(model.config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(folder)
    return folder


def section(number: int, total: int, title: str) -> None:
    print(f"\n[{number}/{total}] {title}", flush=True)


def main(argv=None):
    args = parse_args(argv)
    runs = parse_runs(args.runs)
    out = args.output
    if out.exists():
        shutil.rmtree(out)
    start = time.perf_counter()
    steps = 5

    section(1, steps, "data")
    sentiment = load_vader_sentiment(num_classes=2)
    corpus_file = out / "data" / "pretraining.jsonl"
    sentences = vader_unlabelled_text()  # the train split, all ratings: never a validation or test sentence
    documents = pretraining_text(sentences)
    write_pretraining_text(corpus_file, documents)
    print(f"      {len(documents)} documents: the embedded corpus and {len(sentences)} unlabelled VADER training "
          f"sentences -> {corpus_file}")
    print("      sentiment splits: " + ", ".join(f"{name} {len(split)}" for name, split in sentiment.items()))

    section(2, steps, "tokenizers (trained on the pretraining text)")
    tokenizer_dirs = {}
    for arch, _ in runs:
        tokenizer = train_tokenizer(arch, documents, vocab_size=args.vocab_size)
        tokenizer_dirs[arch] = out / "tokenizers" / arch
        tokenizer.save_pretrained(tokenizer_dirs[arch])
        print(f"      {arch}: {len(tokenizer)} tokens -> {tokenizer_dirs[arch]}")

    section(3, steps, "pretraining")
    results = {}
    for arch, objective in runs:
        print(f"      {arch} with {objective}:", flush=True)
        result = pretrain(PretrainArguments(
            arch=arch, objective=objective, preset="tiny", config_overrides=DEMO_SIZES.get(arch, DEFAULT_SIZE), dataset=str(corpus_file), tokenizer=str(tokenizer_dirs[arch]),
            max_seq_length=64, per_device_train_batch_size=32, max_steps=args.pretrain_steps, learning_rate=2e-3,
            warmup_steps=0.06, lr_scheduler="cosine", logging_steps=min(10, args.pretrain_steps // 4), eval_steps=args.pretrain_steps // 4,
            save_steps=0, report_to_tensorboard=False, output_dir=str(out / "pretrain" / arch),
            overwrite_output_dir=True, seed=args.seed,
        ))
        train_losses = [r["loss"] for r in read_log(result.log_path) if "loss" in r]
        first, last = _mean(train_losses[:3]), _mean(train_losses[-3:])
        metrics = result.eval_metrics
        print(f"      loss {first:.2f} -> {last:.2f} (uniform guessing: {math.log(result.model.config.vocab_size):.2f}); "
              f"held-out accuracy on the predicted tokens {metrics['eval_accuracy']:.1%} against "
              f"{metrics['eval_majority_accuracy']:.1%} for always guessing the most frequent one")
        if not args.quick and not last < first:
            raise SystemExit(f"demo failed: the {arch} {objective} loss did not fall")
        if not args.quick and not metrics["eval_accuracy"] > metrics["eval_majority_accuracy"]:
            if (arch, objective) == runs[0]:  # the model finetuned next must have learned more than unigrams
                raise SystemExit(f"demo failed: {arch} predicts held-out tokens no better than the unigram baseline")
            print(f"      note: {arch} is not above the unigram baseline yet after {args.pretrain_steps} steps "
                  "(more --pretrain-steps)")
        results[arch] = result

    arch, _ = runs[0]
    section(4, steps, f"LoRA finetuning of the pretrained {arch} on VADER sentiment")
    # A model pretrained for minutes on Python's documentation has no sentiment in its frozen word embeddings:
    # adapt them too (a rank-16 update), beside the projections every architecture names alike.
    # (the module names come from the architecture alone: an untrained model of the config shows them)
    base = AutoModel.from_config(AutoConfig.from_pretrained(results[arch].model_dir))
    targets = [*lora_targets(base, None), "word_embeddings"]
    print(f"      LoRA r=16 on {', '.join(targets)}; the classification head trained in full")
    lora = dict(dataset="vader", lora=True, lora_r=16, lora_alpha=32, lora_target_modules=targets,
                num_train_epochs=args.finetune_epochs, learning_rate=2e-3, per_device_train_batch_size=32,
                max_seq_length=64, overwrite_output_dir=True, seed=args.seed, disable_tqdm=False)
    tuned = finetune(FinetuneArguments(model_name_or_path=str(results[arch].model_dir), merge=True,
                                       output_dir=str(out / "finetune"), **lora))
    accuracy = tuned.metrics["test"]["test_accuracy"]
    majority = tuned.metrics["baseline"]["test_majority_accuracy"]
    print(f"      test accuracy {accuracy:.1%} against {majority:.1%} for always answering the majority class")
    print(f"      adapter -> {tuned.adapter_dir}; merged model -> {tuned.merged_dir}")
    print(f"      the floor: the same {arch} with random weights, finetuned the same way (LoRA, steps, seed)", flush=True)
    random_dir = random_init_copy(results[arch].model, results[arch].model_dir, out / "random_init" / arch, args.seed)
    floor = finetune(FinetuneArguments(model_name_or_path=str(random_dir), output_dir=str(out / "finetune_scratch"),
                                       **lora)).metrics["test"]["test_accuracy"]
    print(f"      test accuracy from random weights {floor:.1%}: pretraining adds {100 * (accuracy - floor):+.1f} points "
          f"(pretrained {accuracy:.1%})")
    if not args.quick and not accuracy > majority:
        raise SystemExit("demo failed: the finetuned model is no better than the majority class")

    section(5, steps, "Hub-ready export of the finetuned model")
    model = AutoModelForSequenceClassification.from_pretrained(tuned.merged_dir)
    tokenizer = AutoTokenizer.from_pretrained(tuned.merged_dir)
    folder = export(
        model, tokenizer, out / "export", title=f"hf_xfmr demo: tiny {arch} for sentiment",
        description=f"A tiny {arch} pretrained for {args.pretrain_steps} steps on Python's documentation and "
                    f"VADER sentences, then LoRA-finetuned on VADER sentiment (merged; the same model finetuned "
                    f"the same way from random weights: {floor:.1%} test accuracy). A demonstration, not a useful model.",
        training_logs={f"{a} pretraining": r.log_path for a, r in results.items()} | {"finetuning": tuned.log_file},
        metrics={"accuracy": accuracy, "majority_class_accuracy": majority}, eval_dataset="vader",
        eval_split="test", overwrite=True,
    )
    check = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    batch = tokenizer(["What a wonderful, happy day!", "This is awful and I hate it."], return_tensors="pt",
                      padding=True)
    with torch.no_grad():
        diff = (check(**batch).logits - model.eval()(**batch).logits).abs().max().item()
    print(f"      {folder}: remote code, model.safetensors, README.md (model card), loss_curve.png; reloaded with "
          f"trust_remote_code: max |logit difference| {diff:.1e}")
    if diff > 1e-5:
        raise SystemExit("demo failed: the exported model disagrees with the finetuned one")

    print(f"\nDone in {time.perf_counter() - start:.0f} s. What is where:")
    for path, what in [
        (corpus_file, "pretraining text (JSON lines)"),
        (out / "tokenizers", "one tokenizer per architecture"),
        *[(r.model_dir, f"pretrained {a} (AutoModel.from_pretrained)") for a, r in results.items()],
        *[(r.log_path, f"{a} pretraining log (JSON lines)") for a, r in results.items()],
        (tuned.adapter_dir, "LoRA adapter (PeftModel.from_pretrained)"),
        (tuned.merged_dir, "merged finetuned model"),
        (out / "finetune_scratch", "the same model finetuned from random weights (the floor)"),
        (folder, "Hub-ready export: `hf-xfmr publish` uploads it"),
        (folder / "loss_curve.png", "loss curves"),
    ]:
        print(f"  {str(path):<45} {what}")


def _mean(values) -> float:
    return sum(values) / max(len(values), 1)


if __name__ == "__main__":
    main()
