"""`hf-xfmr finetune`: finetuning (fully, with LoRA or QLoRA) for classification, tagging, extractive QA,
causal-LM / chat SFT or seq2seq generation (summarization, translation)."""

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
    help="finetune (fully, LoRA or QLoRA) for classification, tagging, extractive QA, causal-LM / chat SFT or "
         "seq2seq (summarization, translation)",
    description=(
        "Finetune a model with transformers' Trainer (and PEFT for --lora) on a datasets source: local\n"
        "csv/tsv/json/jsonl/parquet files or folders (offline), a Hub dataset, the built-in 'vader'\n"
        "sentiment sentences or, for seq2seq, the built-in 'html-entities' and 'stdlib-docstrings' tasks.\n"
        "Start from an hf_xfmr or transformers checkpoint folder, or from --arch + --preset for a\n"
        "from-scratch run. --task causal-lm finetunes a decoder (SFT) on 'messages' chats\n"
        "(rendered with the chat template, loss on the assistant turns), 'prompt'/'completion' pairs\n"
        "(loss on the completion) or 'text'; --padding_free flattens batches, --lora --load_in_4bit is\n"
        "QLoRA. --task seq2seq (or summarization / translation) finetunes an encoder-decoder (T5, BART, ...)\n"
        "on --source_column -> --target_column texts (or 'translation' dicts with --source_lang/--target_lang),\n"
        "generating at each evaluation (--num_beams, --max_new_tokens) for ROUGE and BLEU beside a copy-the-\n"
        "first-words baseline. --resume continues a run kept with --keep_checkpoints. The best checkpoint\n"
        "on the validation split (by --metric_for_best_model) is kept; metrics.json, log_history.jsonl and\n"
        "model/ (or adapter/ and, with --merge, merged/) are written to --output_dir. Options can also come\n"
        "from a YAML/JSON file (--config FILE; options given on the command line override it). Each option\n"
        "also has a dashed spelling (--learning-rate)."
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
        "  hf-xfmr finetune --model_name_or_path t5/ --task summarization --dataset docs/ \\\n"
        "      --source_prefix 'summarize: ' --num_beams 4 --max_new_tokens 32\n"
        "  hf-xfmr finetune --model_name_or_path bart/ --task translation --dataset wmt/ \\\n"
        "      --source_lang en --target_lang de --lora --merge\n"
        "  hf-xfmr finetune --config finetune.yaml --learning_rate 1e-4"
    ),
    arguments=FinetuneArguments,
    run=run,
)
