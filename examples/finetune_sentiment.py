"""Finetune on the VADER human-rated sentences (binary sentiment) and compare with the majority class.

    python examples/finetune_sentiment.py --model demo_output/model --lora      # LoRA on a pretrained checkpoint
    python examples/finetune_sentiment.py                                      # tiny BERT from scratch

Needs the VADER ratings once (`make install`, or `python -m hf_xfmr.data.labelled fetch`); offline after
that. With --lora it saves the adapter and the merged model, reloads both (the adapter onto a fresh
base, the merged model through `AutoModelForSequenceClassification`) and checks they agree.
"""

import argparse
import time

import torch
from transformers import AutoModelForSequenceClassification

from hf_xfmr.training import FinetuneArguments, finetune, load_adapter_model


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="checkpoint folder; default: a tiny BERT from scratch")
    parser.add_argument("--lora", action="store_true", help="LoRA adapters + merged model (needs --model)")
    parser.add_argument("--lora-targets", nargs="+", default=None,
                        help="modules to adapt (default: the attention and MLP projections); adding "
                             "word_embeddings helps when the checkpoint's vocabulary saw no sentiment words")
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-train-samples", type=int, default=None)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--output", default="finetune_output")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    return parser.parse_args()


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.model is not None:
        source = dict(model_name_or_path=args.model)
    else:  # from scratch: a small BERT and a WordPiece vocabulary trained on the training sentences
        source = dict(arch="bert", preset="tiny", vocab_size=4000,
                      config_overrides="hidden_size=64,num_hidden_layers=2,num_attention_heads=4,intermediate_size=128")
    options = FinetuneArguments(
        **source, dataset="vader", lora=args.lora, merge=args.lora, lora_target_modules=args.lora_targets,
        num_train_epochs=args.epochs,
        max_train_samples=args.max_train_samples, max_seq_length=64, per_device_train_batch_size=32,
        per_device_eval_batch_size=128,
        learning_rate=args.learning_rate or (1e-3 if args.lora or not args.model else 1e-4),
        output_dir=args.output, overwrite_output_dir=True, use_cpu=True, seed=0,
    )
    start = time.perf_counter()
    result = finetune(options)
    minutes = (time.perf_counter() - start) / 60
    test, baseline = result.metrics["test"], result.metrics["baseline"]
    print(f"\nVADER sentiment, test split ({minutes:.1f} min, best {result.best_checkpoint}):")
    print(f"  accuracy {test['test_accuracy']:.3f}  macro-F1 {test['test_f1']:.3f}  "
          f"majority class {baseline['test_majority_accuracy']:.3f}")
    if test["test_accuracy"] <= baseline["test_majority_accuracy"]:
        raise SystemExit("the finetuned model does not beat the majority class")

    if args.lora:
        batch = result.tokenizer(["What a wonderful, happy day!", "This is the worst film I have seen."],
                                 padding=True, return_tensors="pt")
        adapter = load_adapter_model(result.adapter_dir).eval()
        merged = AutoModelForSequenceClassification.from_pretrained(result.merged_dir).eval()
        with torch.no_grad():
            a, m = adapter(**batch).logits, merged(**batch).logits
        torch.testing.assert_close(m, a, rtol=0, atol=1e-5)
        labels = [merged.config.id2label[i] for i in m.argmax(-1).tolist()]
        print(f"  adapter: {result.adapter_dir}  merged: {result.merged_dir} (reloaded, max |diff| "
              f"{(m - a).abs().max():.1e}); predictions: {labels}")


if __name__ == "__main__":
    main()
