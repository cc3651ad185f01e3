"""Which pretraining objective learns best per unit of compute? XLNet's question, at small scale on a CPU.

Pretrains models of about the same size on the same text with the same token budget (steps x batch x
sequence length), one per objective:

    MLM  ModernBERT (masked language modelling, 30% masking), or BERT where ModernBERT is not installed
    PLM  XLNet (permutation language modelling, two-stream attention)
    CLM  GPT (next-token prediction)

then finetunes each one the same way (all weights, same steps and learning rate) on VADER sentiment
(positive / negative) and reports pretraining time (CPU seconds of this process, which a machine shared
with other jobs does not inflate, and wall-clock seconds), held-out loss and accuracy on the predicted tokens
(each objective predicts different tokens, so these compare runs of one objective, not objectives), and
the finetuned test accuracy (this one compares objectives). A model finetuned from random weights gives
the floor: what pretraining adds.

    python examples/compare_objectives.py                       # about 15 minutes on 2 CPU cores
    python examples/compare_objectives.py --pretrain-steps 2000 --runs bert:mlm,xlnet:plm,gpt:clm

Writes compare_output/results.json and compare_output/results.md (the README table).
"""

import argparse
import json
import shutil
import time
from pathlib import Path

from demo import DEFAULT_SIZE, DEMO_SIZES, parse_runs, write_pretraining_text  # examples/demo.py

from hf_xfmr.data import train_tokenizer
from hf_xfmr.data.labelled import load_vader_sentiment
from hf_xfmr.training import FinetuneArguments, PretrainArguments, finetune, pretrain


def default_runs() -> str:
    """One run per objective: ModernBERT for MLM where this installation has it, else BERT."""
    from hf_xfmr.models import architectures

    mlm = "modernbert" if any(arch.name == "modernbert" for arch in architectures()) else "bert"
    return f"{mlm}:mlm,xlnet:plm,gpt:clm"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default=default_runs(), help="architecture:objective pairs (default: %(default)s)")
    parser.add_argument("--pretrain-steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--finetune-epochs", type=float, default=3.0)
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--no-scratch", action="store_true", help="skip the finetuned-from-random-weights floor")
    parser.add_argument("--output", type=Path, default=Path("compare_output"))
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def finetune_accuracy(args, out: Path, **source) -> float:
    result = finetune(FinetuneArguments(
        dataset="vader", num_train_epochs=args.finetune_epochs, learning_rate=5e-4, per_device_train_batch_size=32,
        max_seq_length=args.seq_len, output_dir=str(out), overwrite_output_dir=True, seed=args.seed, disable_tqdm=True,
        **source,
    ))
    return result.metrics["test"]["test_accuracy"], result.metrics["baseline"]["test_majority_accuracy"]


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    runs = parse_runs(args.runs)
    out = args.output
    if out.exists():
        shutil.rmtree(out)
    sentiment = load_vader_sentiment(num_classes=2)
    corpus_file = out / "data" / "pretraining.jsonl"
    write_pretraining_text(corpus_file, sentiment["train"])
    tokens = args.pretrain_steps * args.batch_size * args.seq_len

    rows = []
    for arch, objective in runs:
        tokenizer_dir = out / "tokenizers" / arch
        train_tokenizer(arch, vocab_size=args.vocab_size).save_pretrained(tokenizer_dir)
        size = DEMO_SIZES.get(arch, DEFAULT_SIZE)
        print(f"\n== {arch} ({objective}): pretraining on {tokens / 1e6:.1f}M tokens", flush=True)
        start, cpu_start = time.perf_counter(), time.process_time()
        result = pretrain(PretrainArguments(
            arch=arch, objective=objective, preset="tiny", config_overrides=size, dataset=str(corpus_file),
            tokenizer=str(tokenizer_dir), max_seq_length=args.seq_len, per_device_train_batch_size=args.batch_size,
            max_steps=args.pretrain_steps, learning_rate=2e-3, lr_scheduler="cosine", logging_steps=20, save_steps=0,
            report_to_tensorboard=False, output_dir=str(out / "pretrain" / arch), overwrite_output_dir=True,
            seed=args.seed,
        ))
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        accuracy, majority = finetune_accuracy(args, out / "finetune" / arch, model_name_or_path=str(result.model_dir))
        scratch = None
        if not args.no_scratch:
            scratch, _ = finetune_accuracy(args, out / "scratch" / arch, arch=arch, tokenizer_name_or_path=str(tokenizer_dir),
                                           config_overrides=",".join(f"{k}={v}" for k, v in size.items()))
        rows.append(dict(arch=arch, objective=objective, parameters=result.model.num_parameters(),
                         pretrain_seconds=seconds, pretrain_cpu_seconds=cpu_seconds, eval_loss=result.eval_metrics["eval_loss"],
                         eval_accuracy=result.eval_metrics["eval_accuracy"], finetuned_accuracy=accuracy,
                         scratch_accuracy=scratch, majority_accuracy=majority))
        print(json.dumps(rows[-1]), flush=True)

    header = ("| objective (model) | parameters | pretraining CPU time (wall) | held-out loss | held-out accuracy "
              "| finetuned test accuracy | from random weights |")
    lines = [header, "|---|---|---|---|---|---|---|"]
    for r in rows:
        scratch = "—" if r["scratch_accuracy"] is None else f"{r['scratch_accuracy']:.1%}"
        lines.append(f"| {r['objective'].upper()} ({r['arch']}) | {r['parameters'] / 1e6:.2f}M | {r['pretrain_cpu_seconds']:.0f} s ({r['pretrain_seconds']:.0f} s) "
                     f"| {r['eval_loss']:.2f} | {r['eval_accuracy']:.1%} | {r['finetuned_accuracy']:.1%} | {scratch} |")
    lines.append(f"\nSame text and token budget ({tokens / 1e6:.1f}M tokens: {args.pretrain_steps} steps x "
                 f"{args.batch_size} x {args.seq_len}); majority class on the test split: {rows[0]['majority_accuracy']:.1%}.")
    table = "\n".join(lines)
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    (out / "results.md").write_text(table + "\n")
    print("\n" + table)
    return rows


if __name__ == "__main__":
    main()
