"""`hf-xfmr export`: a self-contained, Hub-ready folder (weights, generated code, tokenizer, model card)."""

import argparse
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..options import option, parse_key_values
from .catalog import TASKS
from .command import Command, CommandError
from .inputs import checkpoint_config


@dataclass
class ExportArguments:
    checkpoint: str = option("checkpoint folder (config.json + safetensors)", positional=True, metavar="CHECKPOINT")
    folder: str = option("output folder (new or empty, or a previous export with --overwrite)", positional=True,
                         metavar="FOLDER")
    task: str | None = option("head to export; default: CHECKPOINT's own (config.json 'architectures')", None,
                              choices=TASKS)
    tokenizer: str | None = option("tokenizer folder; default: CHECKPOINT when it holds tokenizer files", None,
                                   metavar="PATH")
    repo_id: str | None = option("the Hub repo it will be published to (used in the card's code samples; publish "
                                 "fills it in otherwise)", None, metavar="OWNER/NAME")
    title: str | None = option("model card title (default: FOLDER's name)", None)
    description: str | None = option("model card opening paragraph", None)
    license: str | None = option("license id for the card metadata, e.g. apache-2.0 (default: none stated)", None)
    language: list[str] | None = option("language codes, e.g. en", None, metavar="LANG")
    dataset: list[str] | None = option("training dataset Hub id (repeatable)", None, action="append", metavar="ID")
    base_model: str | None = option("Hub id of the model this one was finetuned from", None, metavar="ID")
    tag: list[str] | None = option("extra card tag (repeatable)", None, action="append", metavar="TAG")
    metric: list[str] | None = option("evaluation result for the card's model-index (repeatable; needs "
                                      "--eval-dataset)", None, action="append", metavar="NAME=VALUE")
    eval_dataset: str | None = option("Hub id of the dataset the metrics come from", None, metavar="ID")
    eval_dataset_config: str | None = option("its configuration, e.g. sst2", None, metavar="NAME")
    eval_split: str | None = option("its split, e.g. validation", None, metavar="SPLIT")
    eval_source: str | None = option("where the metrics come from when it is not a Hub dataset, e.g. 'our dev.csv': "
                                     "they are then shown in the card's text, not in its model-index", None,
                                     metavar="TEXT")
    training: list[str] | None = option("training setting shown in the card, e.g. learning_rate=5e-4 (repeatable)",
                                        None, action="append", metavar="KEY=VALUE")
    training_log: list[str] | None = option("JSON-lines training logs (Trainer log_history records) to plot into "
                                            "loss_curve.png", None, metavar="FILE")
    max_shard_size: str = option("largest weights file before sharding, e.g. 2GB (default: 5GB)", "5GB",
                                 metavar="SIZE")
    overwrite: bool = option("replace FOLDER if it holds a previous export", False)


def _card(options: ExportArguments) -> dict[str, Any]:
    """The model card fields the options give."""
    metrics = parse_key_values(options.metric, "--metric", numbers=True, error=CommandError) or None
    training = parse_key_values(options.training, "--training", error=CommandError) or None
    return dict(title=options.title, description=options.description, license=options.license,
                language=options.language, datasets=options.dataset or (), base_model=options.base_model,
                tags=options.tag or (), metrics=metrics, eval_dataset=options.eval_dataset,
                eval_dataset_config=options.eval_dataset_config, eval_split=options.eval_split,
                eval_source=options.eval_source, training=training, training_logs=options.training_log)


def _finetune_run_card(src: Path, given: dict[str, Any]) -> dict[str, Any]:
    """When SRC is the model/ or merged/ folder of a `hf-xfmr finetune` run: the card fields of that run that
    the options in `given` left unset (`hub.cards.finetune_run_card`), said on stderr."""
    from hf_xfmr.hub.cards import finetune_run_card, finetune_run_folder

    run = finetune_run_folder(src)
    if run is None:
        return {}
    try:
        filled = finetune_run_card(run, given)
    except ValueError as err:
        print(f"warning: cannot read the finetune run in {run} ({err}); the card leaves it out", file=sys.stderr)
        return {}
    if filled:
        print(f"model card: {', '.join(sorted(filled))} from the finetune run in {run}", file=sys.stderr)
    return filled


def _load_model(src: Path, task: str | None, model_type: str):
    """The checkpoint as an hf_xfmr model in eval mode (a transformers checkpoint is converted)."""
    import hf_xfmr
    from hf_xfmr.models.conversion import load_checkpoint
    from hf_xfmr.models.weights import check_weight_files

    try:
        check_weight_files(src)  # the message every command gives (a PEFT adapter folder, a truncated file, ...)
    except ValueError as err:
        raise CommandError(f"cannot load {src}: {err}") from None
    try:
        model = load_checkpoint(src, task=task)
        if not model_type.startswith("xfmr-"):
            model = hf_xfmr.from_transformers(model)
    except (ValueError, KeyError, TypeError, NotImplementedError, OSError) as err:
        raise CommandError(f"cannot load {src}: {err}") from None
    return model.eval()


def _load_tokenizer(src: Path, tokenizer: str | None):
    """--tokenizer, else SRC's tokenizer when it has tokenizer files, else None (with a warning)."""
    from hf_xfmr.models.hub_loading import TOKENIZER_FILES

    if not tokenizer and not any((src / name).is_file() for name in TOKENIZER_FILES):
        print(f"warning: no tokenizer files in {src} and no --tokenizer: exporting without a tokenizer",
              file=sys.stderr)
        return None
    from transformers import AutoTokenizer

    path = Path(tokenizer) if tokenizer else src
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise CommandError(f"cannot load the tokenizer from {path}: {err}") from None


def run(options: ExportArguments, args: argparse.Namespace) -> int:
    from hf_xfmr.hub import ExportError, export

    src, out = Path(options.checkpoint), Path(options.folder)
    card = _card(options)
    model_type = checkpoint_config(src)["model_type"]
    card.update(_finetune_run_card(src, card))
    model = _load_model(src, options.task, model_type)
    tokenizer = _load_tokenizer(src, options.tokenizer)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="exporting without a tokenizer")  # said above already
            folder = export(model, tokenizer, out, repo_id=options.repo_id, **card,
                            max_shard_size=options.max_shard_size, overwrite=options.overwrite)
    except ExportError as err:
        raise CommandError(str(err)) from None
    files = sorted(p.name for p in folder.iterdir())
    print(f"exported {type(model).__name__} ({model.config.model_type}) to {folder}: {', '.join(files)}")
    return 0


COMMAND = Command(
    "export",
    help="write a self-contained, Hub-ready folder (weights, generated code, tokenizer, model card)",
    description=(
        "Export a checkpoint folder as a flat folder that loads with\n"
        "  AutoModel...from_pretrained(FOLDER_OR_REPO, trust_remote_code=True)\n"
        "even where hf_xfmr is not installed: config.json with an auto_map for every Auto class,\n"
        "model.safetensors (sharded with an index when large), generated configuration_<type>.py and\n"
        "modeling_<type>.py, the tokenizer files, generation_config.json for generative models, and a\n"
        "README.md model card (with the loss curves of --training-log files as loss_curve.png).\n"
        "CHECKPOINT may be an hf_xfmr checkpoint or a transformers one (converted on the way)."
    ),
    epilog=(
        "examples:\n"
        "  hf-xfmr export ./runs/bert-mlm ./export/bert-mlm --training-log ./runs/bert-mlm/log.jsonl\n"
        "  hf-xfmr export ./runs/sst2 ./export/sst2 --dataset glue --metric accuracy=0.91 \\\n"
        "      --eval-dataset glue --eval-dataset-config sst2 --eval-split validation\n"
        "  hf-xfmr export ./bert-base-uncased ./export/bert-base --task masked-lm"
    ),
    arguments=ExportArguments,
    run=run,
)
