"""`hf-xfmr finetune`: finetuning (fully, with LoRA or QLoRA) for classification, tagging, extractive QA or
causal-LM / chat SFT."""

import argparse
import sys

from ..training.arguments import FinetuneArguments
from .command import PROG, Command, CommandError


def run(options: FinetuneArguments, args: argparse.Namespace) -> int:
    from hf_xfmr.training.finetune import finetune
    from hf_xfmr.training.finetune_tasks import FinetuneError
    from hf_xfmr.training.pretrain import NonFiniteLossError

    try:
        result = finetune(options)
    except FinetuneError as err:
        raise CommandError(str(err)) from None
    except NonFiniteLossError as err:  # as pretrain: the run failed (status 1), the input was not wrong as such
        print(f"{PROG} finetune: error: {err}", file=sys.stderr)
        return 1
    metrics = result.metrics
    shown = {**metrics.get("eval", {}), **metrics.get("test", {}), **metrics.get("baseline", {})}
    keys = [k for k in shown if not k.endswith(("_runtime", "_per_second", "epoch"))]
    print("\n".join(f"{k}: {shown[k]:.4f}" for k in keys))
    for subset in metrics.get("subsets", {}).values():  # --max_*_samples: the figures above are those of subsets
        print(f"subset: {subset['description']}")
    print(f"best checkpoint: {result.best_checkpoint}")
    for label, path in (("model", result.model_dir), ("adapter", result.adapter_dir),
                        ("merged model", result.merged_dir), ("metrics", result.metrics_file),
                        ("log history", result.log_file)):
        if path is not None:
            print(f"{label}: {path}")
    return 0


COMMAND = Command(
    "finetune",
    help="finetune (fully, LoRA or QLoRA) for classification, tagging, extractive QA or causal-LM / chat SFT",
    description=(
        "Finetune a model with transformers' Trainer (and PEFT for --lora) on a datasets source: local\n"
        "csv/tsv/json/jsonl/parquet files or folders (offline), a Hub dataset, or the built-in 'vader'\n"
        "sentiment sentences. Start from an hf_xfmr or transformers checkpoint folder, or from --arch +\n"
        "--preset for a from-scratch run. --task causal-lm finetunes a decoder (SFT) on 'messages' chats\n"
        "(rendered with the chat template, loss on the assistant turns), 'prompt'/'completion' pairs\n"
        "(loss on the completion) or 'text'; --padding_free flattens batches, --lora --load_in_4bit is\n"
        "QLoRA. The best checkpoint on the validation split (by\n"
        "--metric_for_best_model) is kept; metrics.json, log_history.jsonl and model/ (or adapter/ and,\n"
        "with --merge, merged/) are written to --output_dir. Options can also come from a YAML/JSON file\n"
        "(--config FILE; options given on the command line override it). Each option also has a dashed\n"
        "spelling (--learning-rate)."
    ),
    epilog=(
        "examples:\n"
        "  hf-xfmr finetune --model_name_or_path ckpt/ --dataset vader --lora --merge --output_dir out/\n"
        "  hf-xfmr finetune --arch bert --preset tiny --train_file train.csv --validation_file dev.csv\n"
        "  hf-xfmr finetune --model_name_or_path ckpt/ --task token-classification --dataset ner/ \\\n"
        "      --tokens_column words --tags_column tags\n"
        "  hf-xfmr finetune --model_name_or_path ckpt/ --task question-answering --train_file squad.json\n"
        "  hf-xfmr finetune --model_name_or_path llama/ --task causal-lm --train_file chats.jsonl \\\n"
        "      --lora --load_in_4bit --merge --padding_free\n"
        "  hf-xfmr finetune --config finetune.yaml --learning_rate 1e-4"
    ),
    arguments=FinetuneArguments,
    run=run,
)
