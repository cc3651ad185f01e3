"""Finetuning with transformers' `Trainer` and PEFT: sequence classification, token classification,
extractive question answering and causal-LM supervised finetuning (SFT), on any `datasets` source, fully, with
LoRA adapters, or with LoRA on a 4-bit base (QLoRA).

    from hf_xfmr.training import FinetuneArguments, finetune
    result = finetune(FinetuneArguments(model_name_or_path="my-bert", dataset="data/", lora=True, merge=True))
    result.metrics["eval"]["eval_accuracy"], result.adapter_dir, result.merged_dir

The same options drive `hf-xfmr finetune` (parsed from flags or a YAML file by `HfArgumentParser`).

Where the model comes from: an hf_xfmr checkpoint folder, a transformers checkpoint folder (converted
with `hf_xfmr.from_transformers` first), or an architecture name + size preset for a from-scratch smoke
run (then a tokenizer is trained on the training texts unless one is given). The task head is added on
top of whatever the checkpoint holds; weights the checkpoint lacks are freshly initialised.

LoRA: adapters go on the projections every hf_xfmr architecture names alike (`DEFAULT_LORA_TARGETS`),
so one list fits all. The task head, and any module the checkpoint did not provide (e.g. BERT's pooler
when starting from an MLM checkpoint), are trained in full and saved with the adapter (PEFT's
`modules_to_save`; its default list would miss heads named e.g. `qa_outputs` or `sequence_summary`).
A causal LM's head is the pretrained `lm_head` (tied to the embeddings in most models): it stays frozen.

SFT (`task="causal-lm"`, any architecture with a causal-LM head): rows in TRL's shapes, tokenized by
`hf_xfmr.data.sft` with the loss on the assistant turns / completions, batched padded or padding-free
(`padding_free=True`); evaluation reports the loss and its perplexity. `load_in_4bit=True` loads the checkpoint
with bitsandbytes NF4 weights, prepares it with `peft.prepare_model_for_kbit_training` and trains LoRA adapters;
`merge=True` then folds the adapters into a full-precision copy of the checkpoint.

Seq2seq (`task="seq2seq"`, or `summarization` / `translation`; any architecture with a seq2seq-LM head): source ->
target texts, transformers' `Seq2SeqTrainer` generating at every evaluation, ROUGE and BLEU beside a copy baseline;
the steps that differ are in `finetune_seq2seq.py`. `resume` (`hf-xfmr finetune --resume`, every task) continues an
interrupted run from a checkpoint that `keep_checkpoints=True` wrote with its optimizer state.

Outputs under `output_dir`: `model/` (full finetuning) or `adapter/` (LoRA: adapter weights, the head,
the head config and the tokenizer; `load_adapter_model` reattaches it to a fresh base), `merged/` with
`merge=True` (a plain model folder for `AutoModelFor...`), `base/` for LoRA on a from-scratch model (the
initial weights the adapter belongs to), `metrics.json`, `log_history.jsonl` (Trainer's log history, one
JSON object per line, written as training goes), `finetune_args.json`; `checkpoints/` only with
`keep_checkpoints=True`.

Subsets (`max_train_samples`, ...) are a seeded draw, stratified by label for classification
(`subset_indices`), never the first rows; `metrics.json` records them (`subsets`) and the card says so.
"""

import dataclasses
import inspect
import json
import logging
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data import seq2seq as seq2seq_data
from ..hub.cards import finetune_card_fields, finetune_provenance, name_base_model_in_adapter_card
from ..hub.repo_id import check_model_id, check_repo_id
from ..models.hub_loading import CheckpointSourceError, resolve_checkpoint
from ..models.weights import check_weight_files
from . import finetune_seq2seq as seq2seq
from .finetune_tasks import (
    CAUSAL_LM,
    CLASSIFICATION,
    LABEL_COLUMNS,
    MODEL_INPUTS,
    QUESTION_ANSWERING,
    SEQ2SEQ_TASKS,
    TAGGING,
    TAGS_COLUMNS,
    TEXT_COLUMNS,
    TOKENS_COLUMNS,
    FinetuneError,
    check_answers,
    classification_metrics,
    label_mapping,
    perplexity,
    pick_column,
    postprocess_qa,
    qa_metrics,
    rows_without_text,
    tagging_metrics,
    tokenize_classification,
    tokenize_qa,
    tokenize_tagging,
)

logger = logging.getLogger(__name__)

from .arguments import DEFAULT_LORA_TARGETS  # noqa: E402  (the default of --lora_target_modules)
VADER_DATASETS = ("vader", "vader-3way")  # hf_xfmr.data.labelled
BUILTIN_DATASETS = (*VADER_DATASETS, *seq2seq_data.BUILTIN_DATASETS)  # and hf_xfmr.data.seq2seq's tasks
DEFAULT_BEST_METRIC = {CLASSIFICATION: "accuracy", TAGGING: "f1", QUESTION_ANSWERING: "f1", CAUSAL_LM: "loss",
                       **seq2seq.DEFAULT_METRIC}
DATA_BUILDERS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet",
                 ".txt": "text", ".arrow": "arrow"}
QA_HIDDEN_COLUMNS = ("example_index", "context_offsets")  # kept aside for post-processing, not model inputs


# The options dataclass lives with the other training arguments; re-exported here, where it always was.
from .arguments import FinetuneArguments, read_config_file  # noqa: E402, F401
from ..options import parse_config_overrides  # noqa: E402


@dataclass
class FinetuneResult:
    """What `finetune` produced. `metrics` holds "train", "eval" (best model on validation), "test" (when
    there is a test split), for classification "baseline" (majority-class accuracy), and "subsets" when
    --max_*_samples cut a split (`_subsample`)."""

    metrics: dict
    output_dir: Path
    model_dir: Path | None  # full finetuning
    adapter_dir: Path | None  # LoRA
    merged_dir: Path | None  # LoRA + merge
    log_file: Path
    metrics_file: Path
    best_checkpoint: str | None  # the checkpoint (name) reloaded at the end
    label_names: list[str] | None
    hub_folder: Path | None = None
    model: Any = field(default=None, repr=False)  # the final model (PEFT-wrapped with LoRA, unless merged)
    tokenizer: Any = field(default=None, repr=False)
    trainer: Any = field(default=None, repr=False)


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

def _builder(path: Path) -> tuple[str, dict]:
    suffix = path.suffix.lower()
    if suffix not in DATA_BUILDERS:
        raise FinetuneError(f"{path}: unsupported file type {suffix!r}; use one of {', '.join(DATA_BUILDERS)}.")
    return DATA_BUILDERS[suffix], ({"delimiter": "\t"} if suffix == ".tsv" else {})


def _load_files(files: dict[str, str]):
    import datasets

    paths = {split: Path(p) for split, p in files.items() if p is not None}
    for split, path in paths.items():
        if not path.is_file():
            raise FinetuneError(f"--{split}_file {path} does not exist.")
    builders = [_builder(p) for p in paths.values()]
    if any(b != builders[0] for b in builders):
        raise FinetuneError("--train_file, --validation_file and --test_file must share one file type.")
    name, kwargs = builders[0]
    return datasets.load_dataset(name, data_files={s: str(p) for s, p in paths.items()}, **kwargs)


def load_finetune_data(args: FinetuneArguments):
    """The raw `DatasetDict` named by the arguments (before any split is made or column checked)."""
    import datasets

    if args.train_file is not None:
        return _load_files({"train": args.train_file, "validation": args.validation_file, "test": args.test_file})
    source = args.dataset
    if source in seq2seq_data.BUILTIN_DATASETS:
        return seq2seq_data.builtin_dataset(source)
    if source in VADER_DATASETS:
        from ..data.labelled import load_vader_sentiment

        sources = args.dataset_config.split(",") if args.dataset_config else None
        try:
            return load_vader_sentiment(sources, num_classes=3 if source == "vader-3way" else 2)
        except (FileNotFoundError, ValueError) as err:
            raise FinetuneError(str(err)) from None
    path = Path(source)
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "dataset_info.json").is_file():
            loaded = datasets.load_from_disk(str(path))
        else:
            files = sorted(p for p in path.iterdir() if p.suffix.lower() in DATA_BUILDERS)
            if not files:
                raise FinetuneError(f"--dataset {path}: the folder holds no {'/'.join(DATA_BUILDERS)} files.")
            loaded = datasets.load_dataset(str(path))
    elif path.suffix.lower() in DATA_BUILDERS:
        if not path.is_file():
            raise FinetuneError(f"--dataset {path} does not exist.")
        name, kwargs = _builder(path)
        loaded = datasets.load_dataset(name, data_files={"train": str(path)}, **kwargs)
    else:
        try:
            loaded = datasets.load_dataset(source, args.dataset_config)
        except Exception as err:  # offline, unknown name, bad config: all the user's to fix
            raise FinetuneError(f"--dataset {source!r} is neither a local folder/file nor a loadable dataset: "
                                f"{type(err).__name__}: {err}") from None
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    return loaded


def _standard_splits(raw, args: FinetuneArguments):
    """train / validation / (test): renames dev/valid, holds out a validation split when there is none."""
    import datasets

    splits = dict(raw)
    for alias in ("valid", "dev", "val"):
        if "validation" not in splits and alias in splits:
            splits["validation"] = splits.pop(alias)
    if "train" not in splits:
        raise FinetuneError(f"The dataset has no 'train' split (splits: {', '.join(splits) or 'none'}).")
    if "validation" not in splits:
        if math.ceil(len(splits["train"]) * args.validation_split) >= len(splits["train"]):
            raise FinetuneError(f"The train split ({len(splits['train'])} rows) is too small to hold out "
                                f"--validation_split {args.validation_split} of it; add a validation split.")
        held = splits["train"].train_test_split(test_size=args.validation_split, seed=args.seed)
        splits["train"], splits["validation"] = held["train"], held["test"]
    out = {name: splits[name] for name in ("train", "validation", "test") if name in splits}
    for name, split in out.items():
        if len(split) == 0:
            raise FinetuneError(f"The {name!r} split is empty.")
    return datasets.DatasetDict(out)


def subset_indices(size: int, count: int, seed: int, labels=None) -> list[int]:
    """`count` of the row indices 0..size-1, drawn by a shuffle seeded with `seed` (the same rows for the same
    seed), in their original order. With `labels` (one per row), the draw is stratified: each label keeps
    its share of the rows (rounded by largest remainder), so the subset's majority-class baseline is the
    split's. Never simply the first rows: data files are often ordered (by source, by label)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if labels is None:
        return sorted(rng.permutation(size)[:count].tolist())
    groups: dict = {}
    for i, label in enumerate(labels):
        groups.setdefault(label if isinstance(label, (str, int)) else repr(label), []).append(i)
    quotas = {label: count * len(rows) / size for label, rows in groups.items()}
    taken = {label: int(quota) for label, quota in quotas.items()}
    by_remainder = sorted(groups, key=lambda label: quotas[label] - taken[label], reverse=True)  # stable: first seen
    for label in by_remainder[:count - sum(taken.values())]:
        taken[label] += 1
    return sorted(i for label, rows in groups.items() for i in rng.permutation(rows)[:taken[label]].tolist())


def _subsample(data: "_TaskData", args: FinetuneArguments) -> None:
    """Cut the splits to --max_train_samples / --max_eval_samples / --max_test_samples (`subset_indices`:
    seeded with --seed, stratified by label for classification), after the labels were read from the whole
    splits. Each cut is recorded in `data.subsets` (split -> examples, of, how, description) and logged:
    metrics.json and the model card say that the figures are those of subsets."""
    limits = {"train": args.max_train_samples, "validation": args.max_eval_samples, "test": args.max_test_samples}
    stratified = args.task == CLASSIFICATION
    how = f"a seeded shuffle{' stratified by label' if stratified else ''} (seed {args.seed})"
    for name, limit in limits.items():
        split = data.raw.get(name)
        if split is None or limit is None or limit >= len(split):
            continue
        labels = split[data.columns["label"]] if stratified else None
        data.raw[name] = split.select(subset_indices(len(split), limit, args.seed, labels))
        data.subsets[name] = {"examples": limit, "of": len(split), "how": how,
                              "description": f"{name}: {limit:,} of {len(split):,} examples, {how}"}
    if data.subsets:
        logger.warning("Using subsets of the data (--max_train_samples / --max_eval_samples / --max_test_samples); "
                       "the metrics are those of these subsets: %s.",
                       "; ".join(subset["description"] for subset in data.subsets.values()))


@dataclass
class _TaskData:
    """The raw splits, the columns and labels found in them, and the tokenized features."""

    raw: Any
    columns: dict
    label_names: list[str] | None
    lookup: dict | None
    features: dict = field(default_factory=dict)  # split -> tokenized Dataset (model inputs only)
    qa_side: dict = field(default_factory=dict)  # split -> (example indices, context offsets) per feature
    max_answer_length: int = 30
    subsets: dict = field(default_factory=dict)  # split -> how it was cut to --max_*_samples (`_subsample`)


def _find_columns(columns: list[str], args: FinetuneArguments) -> dict:
    """The task's columns (role -> column name) among `columns`: those named by options, else found by name."""
    if args.task == CLASSIFICATION:
        found = {
            "text": pick_column(columns, args.text_column, TEXT_COLUMNS, "text", "text_column"),
            "pair": pick_column(columns, args.text_pair_column, (), "second text", "text_pair_column")
            if args.text_pair_column else None,
            "label": pick_column(columns, args.label_column, LABEL_COLUMNS, "labels", "label_column"),
        }
    elif args.task == TAGGING:
        found = {"tokens": pick_column(columns, args.tokens_column, TOKENS_COLUMNS, "words", "tokens_column"),
                 "tags": pick_column(columns, args.tags_column, TAGS_COLUMNS, "tags", "tags_column")}
    elif seq2seq.is_seq2seq(args.task):
        found = seq2seq.find_columns(columns, args)
    elif args.task == CAUSAL_LM:
        from ..data.sft import SFTDataError, sft_format

        try:
            found = sft_format(columns, args.text_column)[1]
        except SFTDataError as err:
            raise FinetuneError(str(err)) from None
    else:
        found = {"question": pick_column(columns, args.question_column, (), "questions", "question_column"),
                 "context": pick_column(columns, args.context_column, (), "contexts", "context_column"),
                 "answers": pick_column(columns, args.answers_column, (), "answers", "answers_column")}
    return found


def _inspect_columns(raw, args: FinetuneArguments) -> _TaskData:
    found = _find_columns(raw["train"].column_names, args)
    for split_name, split in raw.items():  # every split needs the columns found in train
        missing = [c for c in found.values() if c is not None and c not in split.column_names]
        if missing:
            raise FinetuneError(f"Split {split_name!r} lacks column(s) {', '.join(missing)} (its columns: "
                                f"{', '.join(split.column_names)}).")
    names = lookup = None
    if args.task == CLASSIFICATION:
        names, lookup = label_mapping(raw, found["label"])
    elif args.task == TAGGING:
        names, lookup = label_mapping(raw, found["tags"], per_token=True)
    elif args.task == QUESTION_ANSWERING:
        for split_name, split in raw.items():
            check_answers(split, found["answers"], found["context"], split_name)
    return _TaskData(raw=raw, columns=found, label_names=names, lookup=lookup)


def _text_columns(args: FinetuneArguments, found: dict) -> dict[str, str]:
    """The columns of `found` that hold the texts (words for tagging), each with the option naming it."""
    options = {"text": "text_column", "pair": "text_pair_column", "tokens": "tokens_column",
               "question": "question_column", "context": "context_column",
               "messages": "text_column", "prompt": "text_column", "completion": "text_column",
               "source": "source_column", "target": "target_column"}
    return {found[role]: option for role, option in options.items() if found.get(role) is not None}


def _skip_rows_without_text(raw, args: FinetuneArguments):
    """`raw` (a DatasetDict as loaded, before a validation split is held out, so that row indices are those
    of the files) without the rows that lack a text (an empty CSV cell): nothing to learn from or to
    predict for. A warning says how many were skipped, and which."""
    import datasets

    if "train" not in raw:
        return raw  # _standard_splits says so
    columns = _text_columns(args, _find_columns(raw["train"].column_names, args))
    kept = {}
    for split_name, split in raw.items():
        present = {column: option for column, option in columns.items() if column in split.column_names}
        if args.task == CAUSAL_LM:
            missing = _sft_rows_without_content(split, args, split_name)
        elif seq2seq.is_seq2seq(args.task):
            missing = seq2seq.rows_without_text(split, args, split_name)
        else:
            missing = rows_without_text(split, present, split_name, word_lists=args.task == TAGGING)
        if missing and len(missing) == len(split):
            raise FinetuneError(f"Split {split_name!r} has no row with a value in column(s) {', '.join(columns)}: "
                                "every one is empty. Check the data, or name the right column(s) with "
                                f"{', '.join('--' + option for option in columns.values())}.")
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            logger.warning("Skipped %d of %d rows of split %r: no text in column(s) %s (row indices %s; an empty "
                           "CSV cell reads as no text).", len(missing), len(split), split_name, ", ".join(columns),
                           shown)
            absent = set(missing)
            split = split.select([i for i in range(len(split)) if i not in absent])
        kept[split_name] = split
    return datasets.DatasetDict(kept)


def _sft_rows_without_content(split, args: FinetuneArguments, split_name: str) -> list[int]:
    """Rows of an SFT split with an empty column (skipped); a FinetuneError for a row of the wrong shape."""
    from ..data.sft import SFTDataError, check_sft_rows, sft_format

    try:
        return check_sft_rows(split, *sft_format(split.column_names, args.text_column), split_name)
    except SFTDataError as err:
        raise FinetuneError(str(err)) from None


def _tokenize(data: _TaskData, tokenizer, args: FinetuneArguments, accepted: set[str]) -> None:
    max_length = min(args.max_seq_length, tokenizer.model_max_length)
    if args.task == CAUSAL_LM:
        return _tokenize_sft(data, tokenizer, args, max_length)
    if seq2seq.is_seq2seq(args.task):
        return seq2seq.tokenize(data, tokenizer, args, max_length)
    cols = data.columns
    for split_name, split in data.raw.items():
        if args.task == CLASSIFICATION:
            fn, kwargs = tokenize_classification, dict(
                tokenizer=tokenizer, text_column=cols["text"], pair_column=cols["pair"],
                label_column=cols["label"], lookup=data.lookup, max_length=max_length)
        elif args.task == TAGGING:
            fn, kwargs = tokenize_tagging, dict(
                tokenizer=tokenizer, tokens_column=cols["tokens"], tags_column=cols["tags"], lookup=data.lookup,
                max_length=max_length, label_all_tokens=args.label_all_tokens)
        else:
            fn, kwargs = tokenize_qa, dict(
                tokenizer=tokenizer, question_column=cols["question"], context_column=cols["context"],
                answers_column=cols["answers"], max_length=max_length, stride=args.doc_stride)
        features = split.map(fn, fn_kwargs=kwargs, batched=True, remove_columns=split.column_names,
                             with_indices=args.task == QUESTION_ANSWERING, desc=f"tokenizing {split_name}")
        if args.task == QUESTION_ANSWERING:
            data.qa_side[split_name] = (list(features["example_index"]), list(features["context_offsets"]))
        keep = [c for c in features.column_names if c in accepted]
        data.features[split_name] = features.select_columns(keep)


def _tokenize_sft(data: _TaskData, tokenizer, args: FinetuneArguments, max_length: int) -> None:
    """SFT rows -> `input_ids` and `labels` (`data.sft.tokenize_sft`); rows left with nothing to predict (a
    prompt that fills --max_seq_length) are dropped with a warning."""
    from ..data.sft import MESSAGES, SFTDataError, has_targets, is_conversational, sft_format, tokenize_sft

    fmt, columns = sft_format(data.raw["train"].column_names, args.text_column)
    if fmt == MESSAGES or is_conversational(data.raw["train"][0]):
        _require_chat_tokenizer(tokenizer)
    for split_name, split in data.raw.items():
        kwargs = dict(tokenizer=tokenizer, fmt=fmt, columns=columns, max_length=max_length,
                      loss_on_prompt=args.loss_on_prompt)
        try:
            features = split.map(tokenize_sft, fn_kwargs=kwargs, batched=True, remove_columns=split.column_names,
                                 desc=f"tokenizing {split_name}")
        except SFTDataError as err:
            raise FinetuneError(str(err)) from None
        empty = [i for i, labels in enumerate(features["labels"]) if not has_targets(labels)]
        if len(empty) == len(features):
            raise FinetuneError(f"No row of split {split_name!r} has a token to learn within --max_seq_length "
                                f"{max_length}: the prompts fill it. Raise --max_seq_length (or pass "
                                "--loss_on_prompt).")
        if empty:
            logger.warning("Dropped %d of %d rows of split %r: nothing left to learn within --max_seq_length %d (the "
                           "prompt fills it).", len(empty), len(features), split_name, max_length)
            dropped = set(empty)
            features = features.select([i for i in range(len(features)) if i not in dropped])
        data.features[split_name] = features


def _require_chat_tokenizer(tokenizer) -> None:
    """Chat rows need a chat template and (to find the assistant turns) a fast tokenizer's character offsets."""
    from ..data.sft import SFTDataError, require_chat_template

    try:
        require_chat_template(tokenizer)
    except SFTDataError as err:
        raise FinetuneError(str(err)) from None
    if not tokenizer.is_fast:
        raise FinetuneError(f"Chat data needs a fast tokenizer (character offsets find the assistant turns); "
                            f"{type(tokenizer).__name__} is not one.")


# ---------------------------------------------------------------------------------------------
# Tokenizer and model
# ---------------------------------------------------------------------------------------------

def _training_texts(data: _TaskData, task: str, args: FinetuneArguments) -> list[str]:
    train, cols = data.raw["train"], data.columns
    if task == CLASSIFICATION:
        return list(train[cols["text"]]) + (list(train[cols["pair"]]) if cols["pair"] else [])
    if task == TAGGING:
        return [" ".join(words) for words in train[cols["tokens"]]]
    if seq2seq.is_seq2seq(task):
        return seq2seq.training_texts(data, args)
    if task == CAUSAL_LM:  # every text, and every message's content
        return [m["content"] if isinstance(m, dict) else m for column in cols.values() for value in train[column]
                for m in (value if isinstance(value, list) else [value])]
    return list(train[cols["question"]]) + list(train[cols["context"]])


def _load_tokenizer(args: FinetuneArguments, data: _TaskData):
    from transformers import AutoTokenizer

    source = args.tokenizer_name_or_path or args.model_name_or_path
    if source is not None:
        try:
            tokenizer = AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as err:
            flag = "--tokenizer_name_or_path" if args.tokenizer_name_or_path else "--model_name_or_path"
            raise FinetuneError(f"No usable tokenizer in {source} ({flag}): {err}. Save one there with "
                                "`tokenizer.save_pretrained` or pass --tokenizer_name_or_path.") from None
    else:
        from ..data.tokenizers import train_tokenizer

        try:
            tokenizer = train_tokenizer(args.arch, _training_texts(data, args.task, args), vocab_size=args.vocab_size,
                                        model_max_length=args.max_seq_length)
        except ValueError as err:
            raise FinetuneError(f"Cannot train a tokenizer for --arch {args.arch}: {err} Pass "
                                "--tokenizer_name_or_path.") from None
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise FinetuneError("The tokenizer has neither a pad nor an end-of-sequence token; batches cannot be "
                                "padded.")
        tokenizer.pad_token = tokenizer.eos_token  # GPT-style tokenizers: pad with EOS (masked out anyway)
    if args.task in (TAGGING, QUESTION_ANSWERING) and not tokenizer.is_fast:
        raise FinetuneError(f"{args.task} needs a fast tokenizer (word ids / character offsets); "
                            f"{type(tokenizer).__name__} is not one.")
    return tokenizer


def _chat_template(value: str) -> str:
    from ..data.sft import SFTDataError, resolve_chat_template

    try:
        return resolve_chat_template(value)
    except SFTDataError as err:
        raise FinetuneError(str(err)) from None


def _parse_overrides(text: str | None) -> dict:
    """--config_overrides as a dict; a malformed item is a FinetuneError."""
    return parse_config_overrides(text, error=FinetuneError)


def _label_kwargs(data: _TaskData) -> dict:
    if data.label_names is None:
        return {}
    return {"num_labels": len(data.label_names), "id2label": dict(enumerate(data.label_names)),
            "label2id": {name: i for i, name in enumerate(data.label_names)}}


def _token_id_kwargs(config_class, tokenizer) -> dict:
    declared = {f.name for f in dataclasses.fields(config_class)}
    out = {}
    for role in ("pad", "bos", "eos", "cls", "sep", "mask"):
        token_id = getattr(tokenizer, f"{role}_token_id", None)
        if f"{role}_token_id" in declared and token_id is not None:
            out[f"{role}_token_id"] = token_id
    return out


def _model_class(arch, task: str, args: FinetuneArguments | None = None):
    try:
        return arch.model_class(seq2seq.REGISTRY_TASK if seq2seq.is_seq2seq(task) else task)
    except ValueError as err:
        if seq2seq.is_seq2seq(task):
            raise seq2seq.model_class_error(err, args) from None
        hint = ""
        if task == CAUSAL_LM:  # decided by the registry: every architecture with a causal-LM head
            from hf_xfmr.models.registry import architectures

            decoders = ", ".join(a.name for a in architectures() if CAUSAL_LM in a.classes)
            hint = f" Causal-LM / SFT finetuning needs a decoder with a causal-LM head: {decoders}."
        raise FinetuneError(f"Cannot finetune for {task}: {err}{hint}") from None


def _adopt_checkpoint_labels(config: dict, model_class, data: _TaskData) -> None:
    """Continuing from a checkpoint that already has this head and these labels keeps its label ids."""
    id2label = config.get("id2label") or {}
    names = [id2label[k] for k in sorted(id2label, key=int)]
    if (data.label_names is None or (config.get("architectures") or [None])[0] != model_class.__name__
            or sorted(names) != sorted(data.label_names) or names == data.label_names):
        return
    remap = {i: names.index(name) for i, name in enumerate(data.label_names)}
    data.lookup = {value: remap[i] for value, i in data.lookup.items()}
    data.label_names = names


def _load_head(path: Path, task: str | None, data: "_TaskData | None" = None, args=None, **kwargs):
    """(model, loading info) for `path`, an hf_xfmr or transformers checkpoint folder, with the head of
    `task` (or of the class named in the folder's config when `task` is None)."""
    import hf_xfmr
    from hf_xfmr.models import get_architecture

    config_file = path / "config.json"
    if not config_file.is_file():
        raise FinetuneError(f"--model_name_or_path {path} is not a checkpoint folder (no config.json there).")
    try:
        check_weight_files(path)  # the same message as every other command for a truncated or missing file
    except ValueError as err:
        raise FinetuneError(str(err)) from None
    config = json.loads(config_file.read_text())
    model_type = config.get("model_type")
    with tempfile.TemporaryDirectory() as tmp:
        source = path
        if not str(model_type).startswith("xfmr-"):  # a transformers checkpoint: convert it, keeping its head
            try:
                converted = hf_xfmr.from_transformers(path)
            except (ValueError, KeyError, TypeError, NotImplementedError, OSError) as err:
                raise FinetuneError(f"Cannot use {path} (model_type {model_type!r}): {err}") from None
            converted.save_pretrained(tmp)
            source, model_type = Path(tmp), converted.config.model_type
            config = json.loads((source / "config.json").read_text())
        try:
            arch = get_architecture(model_type)
        except ValueError as err:
            raise FinetuneError(f"--model_name_or_path {path}: {err}") from None
        if task is None:
            name = (kwargs["config"].architectures or [None])[0]
            model_class = next((c for c in arch.classes.values() if c.__name__ == name), None)
            if model_class is None:
                raise FinetuneError(f"{name} is not an hf_xfmr {arch.name} class.")
        else:
            model_class = _model_class(arch, task, args)
        if data is not None:
            _adopt_checkpoint_labels(config, model_class, data)
            kwargs.update(_label_kwargs(data))
        model, info = model_class.from_pretrained(source, output_loading_info=True, ignore_mismatched_sizes=True,
                                                  **kwargs)
    _set_name_or_path(model, path)  # what PEFT records as the adapter's base
    return model, info


def _set_name_or_path(model, path: Path) -> None:
    model.config._name_or_path = model.name_or_path = str(path.resolve())


def _from_checkpoint(args: FinetuneArguments, data: "_TaskData"):
    """(model, names of the modules the checkpoint did not provide). transformers' load report is held back:
    a new task head is what finetuning adds, and the old one it drops is no problem; what else is new (BERT's
    pooler under an MLM checkpoint) is named in one warning."""
    from hf_xfmr.models.conversion import held_load_report

    path = Path(args.model_name_or_path)
    with held_load_report():
        model, info = _load_head(path, args.task, data, args, **_quantization_kwargs(args))
    mismatched = [entry[0] if isinstance(entry, tuple) else entry for entry in info.get("mismatched_keys", [])]
    if mismatched:
        logger.warning("Re-initialised %s: their shapes in %s do not fit this task's labels.", mismatched, path)
    fresh = {key.rsplit(".", 1)[0] for key in [*info.get("missing_keys", []), *mismatched]}
    head = set(head_modules(model))
    outside = sorted(name for name in fresh if name.split(".")[0] not in head)
    if outside:
        logger.warning("%s has no weights for %s (outside the task head): they start from random values and are "
                       "trained.", path, ", ".join(outside))
    return model, fresh


def _quantization_kwargs(args: FinetuneArguments) -> dict:
    """`from_pretrained` keywords of --load_in_4bit: bitsandbytes NF4 weights, computing in bf16 with --bf16, else
    fp32 (CPUs without bf16 kernels run fp32 fastest, and the LoRA updates stay exact)."""
    if not args.load_in_4bit:
        return {}
    import torch
    from transformers import BitsAndBytesConfig

    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise FinetuneError("--load_in_4bit needs bitsandbytes: pip install 'hf_xfmr[qlora]'.") from None
    return {"quantization_config": BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=torch.bfloat16 if args.bf16 else torch.float32)}


def _scratch_architecture(args: FinetuneArguments):
    """(architecture, model class) for --arch and --task, or a FinetuneError."""
    from hf_xfmr.models import get_architecture

    try:
        arch = get_architecture(args.arch)
    except ValueError as err:
        raise FinetuneError(f"--arch: {err}") from None
    return arch, _model_class(arch, args.task, args)


def _from_scratch(args: FinetuneArguments, data: _TaskData, tokenizer):
    arch, model_class = _scratch_architecture(args)
    kwargs = {"vocab_size": _vocab_size(tokenizer), **_token_id_kwargs(arch.config_class, tokenizer),
              **_label_kwargs(data), **_parse_overrides(args.config_overrides)}
    try:
        config = arch.config_class.from_preset(args.preset, **kwargs)
    except (ValueError, TypeError, KeyError) as err:
        raise FinetuneError(f"Cannot build a {args.arch} {args.preset!r} config: {err}") from None
    return model_class(config), None


def _vocab_size(tokenizer) -> int:
    """Embedding rows the tokenizer needs: its largest id + 1 (can exceed len(tokenizer) when ids have gaps)."""
    return max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)


def _check_vocab(model, tokenizer) -> None:
    vocab = model.get_input_embeddings().num_embeddings
    if _vocab_size(tokenizer) > vocab:
        raise FinetuneError(f"The tokenizer produces ids up to {_vocab_size(tokenizer) - 1} but the model has only "
                            f"{vocab} embeddings: they do not belong together. Pass the tokenizer the model was "
                            "trained with.")


# ---------------------------------------------------------------------------------------------
# LoRA
# ---------------------------------------------------------------------------------------------

def head_modules(model) -> list[str]:
    """Top-level modules with parameters other than the backbone (`model.<base_model_prefix>`): the task head."""
    backbone = model.base_model_prefix
    return [name for name, module in model.named_children()
            if name != backbone and any(True for _ in module.parameters())]


def lora_targets(model, requested: list[str] | None) -> list[str]:
    """`requested` module names after checking the model has each, else the defaults the model has."""
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    if requested:
        missing = [t for t in requested if t not in present]
        if missing:
            own = ", ".join(t for t in DEFAULT_LORA_TARGETS if t in present) or "none of the defaults"
            raise FinetuneError(f"--lora_target_modules: {', '.join(missing)} not found in "
                                f"{type(model).__name__}; its projections include {own}.")
        return list(requested)
    found = [t for t in DEFAULT_LORA_TARGETS if t in present]
    if not found:
        raise FinetuneError(f"{type(model).__name__} has none of the default LoRA targets "
                            f"({', '.join(DEFAULT_LORA_TARGETS)}); pass --lora_target_modules.")
    return found


def expert_parameters(model) -> list[str]:
    """PEFT `target_parameters` for the stacked expert weights of sparse mixture-of-experts blocks
    (`layers.moe.GroupedExperts`: one (E, ...) parameter per projection, not one `nn.Linear` per expert)."""
    from ..layers.moe import GroupedExperts

    if not any(isinstance(module, GroupedExperts) for module in model.modules()):
        return []
    return ["experts.gate_up_proj", "experts.down_proj"]


def apply_lora(model, task: str, *, r: int = 8, alpha: int = 16, dropout: float = 0.05,
               target_modules: list[str] | None = None, fresh_modules=None):
    """Wrap `model` in a PEFT LoRA model. Trained in full and saved with the adapter: the task head, and
    `fresh_modules` (modules the checkpoint did not provide, e.g. a new pooler). With the default targets, a
    mixture of experts gets adapters on its stacked expert weights too (PEFT's `target_parameters`, which
    takes no dropout)."""
    from peft import LoraConfig, TaskType, get_peft_model

    task_type = {CLASSIFICATION: TaskType.SEQ_CLS, TAGGING: TaskType.TOKEN_CLS,
                 QUESTION_ANSWERING: TaskType.QUESTION_ANS, CAUSAL_LM: TaskType.CAUSAL_LM,
                 **dict.fromkeys(SEQ2SEQ_TASKS, TaskType.SEQ_2_SEQ_LM)}[task]
    targets = lora_targets(model, target_modules)
    experts = [] if target_modules else expert_parameters(model)
    if experts and dropout:
        logger.info("LoRA on the experts' stacked weights takes no dropout: --lora_dropout %g is set to 0.", dropout)
        dropout = 0.0
    # a causal LM's or seq2seq LM's head is pretrained (tied to the embeddings in most): it stays frozen
    to_save = [] if task == CAUSAL_LM or task in SEQ2SEQ_TASKS else head_modules(model)
    for name in sorted(fresh_modules or ()):
        if not any(name == h or name.startswith(h + ".") for h in to_save) and name.rsplit(".", 1)[-1] not in targets:
            to_save.append(name)
    config = LoraConfig(task_type=task_type, r=r, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=targets, modules_to_save=to_save, target_parameters=experts or None)
    peft_model = get_peft_model(model, config)
    # PEFT appends its own head names for classification ("classifier", "score") to ours, repeating
    # "classifier": adapter_config.json lists each module once.
    saved = peft_model.peft_config["default"]
    saved.modules_to_save = list(dict.fromkeys(saved.modules_to_save))
    return peft_model


def load_adapter_model(adapter_dir, base_model_name_or_path=None):
    """A PEFT model from an `adapter/` folder written by `finetune`: a fresh base is loaded from the original
    checkpoint (recorded in the adapter config; or `base_model_name_or_path`) with the head config saved
    next to the adapter (labels, num_labels), then the adapter and the trained head are attached."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoConfig

    import hf_xfmr  # noqa: F401  (registers the architectures)
    from hf_xfmr.models.conversion import held_load_report

    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise FinetuneError(f"{adapter_dir} is not an adapter folder (no adapter_config.json).")
    try:
        check_weight_files(adapter_dir, adapter=True)
    except ValueError as err:
        raise FinetuneError(str(err)) from None
    base = base_model_name_or_path or PeftConfig.from_pretrained(adapter_dir).base_model_name_or_path
    if not base:
        raise FinetuneError(f"{adapter_dir}: the adapter does not record its base model; pass base_model_name_or_path.")
    # transformers' load report would list the head (and a new pooler) as MISSING from the base, although
    # the adapter restores them right below: it is held back, and only weights that neither holds are named.
    with held_load_report():
        model, info = _load_head(Path(base), None, config=AutoConfig.from_pretrained(adapter_dir))
    restored = _adapter_restores(adapter_dir)
    missing = sorted(key for key in info.get("missing_keys", ()) if key not in restored)
    if missing:
        logger.warning("%d weight(s) are neither in the base model %s nor in the adapter %s, so they are randomly "
                       "initialised: %s", len(missing), base, adapter_dir, ", ".join(missing))
    return PeftModel.from_pretrained(model, adapter_dir)


def _head_config(config):
    """The config saved next to an adapter: the base's, without a 4-bit `quantization_config` (the adapter
    belongs to the checkpoint's weights, which `load_adapter_model` and merging load in full precision)."""
    if getattr(config, "quantization_config", None) is None:
        return config
    import copy

    config = copy.deepcopy(config)
    del config.quantization_config
    return config


def _adapter_restores(adapter_dir: Path) -> set[str]:
    """Names (in the base model) of the weights a PEFT adapter folder holds in full: its `modules_to_save`,
    stored as `base_model.model.<name>`."""
    from safetensors import safe_open

    with safe_open(str(adapter_dir / "adapter_model.safetensors"), framework="pt") as f:
        return {key.removeprefix("base_model.model.") for key in f.keys()}


# ---------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------

def _jsonl_callback(path: Path):
    from transformers import TrainerCallback

    class JsonlLogCallback(TrainerCallback):
        """Appends each Trainer log (the entries of `state.log_history`) to a JSON-lines file as it happens."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and state.log_history:
                with open(path, "a") as f:
                    f.write(json.dumps(state.log_history[-1]) + "\n")

    return JsonlLogCallback()


# A classification finetune still at chance past STUCK_AFTER of its steps is stuck: its training loss within
# STUCK_MARGIN x log(num_labels) of log(num_labels) (what a model giving every class the same probability scores;
# the mean of the last STUCK_LOGS loss logs), or every validation prediction the same class.
STUCK_AFTER = 0.3
STUCK_MARGIN = 0.05
STUCK_LOGS = 3


def stuck_finetune_callback(num_labels: int, label_names=None, after: float = STUCK_AFTER,
                            margin: float = STUCK_MARGIN):
    """A Trainer callback that warns once (`logger.warning`) when a classification finetune is stuck at chance
    past `after` of its steps (see STUCK_AFTER), with what to try. `callback.message` holds the warning (None
    while the run looks healthy); `callback.watch(compute_metrics)` wraps the validation metrics function so
    that the callback sees the predicted classes."""
    import numpy as np
    from transformers import TrainerCallback

    chance = math.log(max(num_labels, 2))

    class StuckFinetuneCallback(TrainerCallback):
        def __init__(self):
            self.message: str | None = None
            self.losses: list[float] = []
            self.only_class: int | None = None  # set by an evaluation whose predictions were all this class

        def watch(self, compute_metrics):
            def metrics(prediction):
                predicted = np.unique(np.asarray(prediction.predictions).reshape(-1))
                self.only_class = int(predicted[0]) if predicted.size == 1 else None
                return compute_metrics(prediction)
            return metrics

        def _warn(self, state, reason: str) -> None:
            self.message = (
                f"Finetuning looks stuck at chance after {state.global_step} of {state.max_steps} steps: {reason}. "
                "Try a lower --learning_rate (a pretrained model pushed into answering one class) or a higher one "
                "(one that learns too slowly), a longer warm-up (--warmup_steps), more --num_train_epochs; check "
                "that the label column holds the labels of the texts (--label_column); and finetune the same "
                "architecture from random weights (--arch instead of --model_name_or_path): if that one learns, "
                "the checkpoint is what holds it back.")
            logger.warning(self.message)

        def _late(self, state) -> bool:
            return self.message is None and state.max_steps > 0 and state.global_step >= after * state.max_steps

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))
            if self._late(state) and self.losses:
                recent = self.losses[-STUCK_LOGS:]
                loss = sum(recent) / len(recent)
                if loss >= (1 - margin) * chance:
                    self._warn(state, f"the training loss is {loss:.3f}, and log({num_labels}) = {chance:.3f} is "
                                      "what a model that gives every class the same probability scores")

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            only, self.only_class = self.only_class, None
            if only is not None and self._late(state):
                name = label_names[only] if label_names and 0 <= only < len(label_names) else only
                self._warn(state, f"every validation prediction is the class {name!r}")

    return StuckFinetuneCallback()


def _trainer(nan_policy: str, base=None, **kwargs):
    """transformers' Trainer, checking every training loss as pretraining does (`--nan_policy`): a NaN/inf
    loss stops the run with a NonFiniteLossError naming the step ("stop"), or gives no gradient and is
    counted in `trainer.skipped_batches` ("skip"). Trainer alone would keep training and hide such losses
    in its log (`logging_nan_inf_filter`)."""
    import torch
    from transformers import Trainer

    from .pretrain import NonFiniteLossError

    class FinetuneTrainer(base or Trainer):
        skipped_batches = 0

        def _issue_warnings_after_load(self, load_result):
            # Reloading the best checkpoint: a tied weight (a causal LM's lm_head) is saved once, under the
            # embeddings, and stays tied, so its key is not "missing" (Trainer only knows the older
            # `_keys_to_ignore_on_save` list).
            tied = set(getattr(self.model, "_tied_weights_keys", None) or ())
            if tied and getattr(self.model.config, "tie_word_embeddings", False):
                load_result.missing_keys[:] = [key for key in load_result.missing_keys if key not in tied]
            super()._issue_warnings_after_load(load_result)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            result = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                          num_items_in_batch=num_items_in_batch)
            loss = result[0] if return_outputs else result
            if not model.training:  # evaluation losses are reported as they are
                return result
            bad = (~torch.isfinite(loss.detach())).any().float()
            if self.args.world_size > 1:  # every process decides alike (else one would wait for the others)
                bad = self.accelerator.reduce(bad, reduction="sum")
            if not bad:
                return result
            if nan_policy == "stop":
                raise NonFiniteLossError(_nonfinite_message(model, self.state.global_step + 1))
            self.skipped_batches += 1
            loss = loss.detach().requires_grad_()  # backward reaches no weight: this batch updates nothing
            return (loss, *result[1:]) if return_outputs else loss

    return FinetuneTrainer(**kwargs)


def _nonfinite_message(model, step: int) -> str:
    import torch

    broken = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p.detach()).all())]
    if broken and step == 1:
        cause = (f" The model's weights hold NaN/inf values before any update ({len(broken)} tensor(s), e.g. "
                 f"{broken[0]}): the checkpoint (--model_name_or_path) is damaged; save or download it again.")
    elif broken:
        cause = (f" Training diverged: {len(broken)} weight tensor(s) hold NaN/inf values (e.g. {broken[0]}). Lower "
                 "--learning_rate or raise --warmup_steps.")
    else:
        cause = " The weights are finite, so a batch produced it: check the data, or lower --learning_rate."
    return (f"The training loss is not finite (NaN or inf) at step {step}; no model was saved.{cause} "
            "Pass --nan_policy skip to skip such batches instead.")


def _compute_metrics(task: str, data: _TaskData, split: str, tokenizer=None, args=None):
    if seq2seq.is_seq2seq(task):
        return seq2seq.compute_metrics(data, split, tokenizer, args)
    if task == CAUSAL_LM:
        return None  # the evaluation loss (and its perplexity, added afterwards) is the metric
    if task == CLASSIFICATION:
        return lambda p: classification_metrics(p.predictions, p.label_ids)
    if task == TAGGING:
        outside = next((i for i, n in enumerate(data.label_names) if n.upper() == "O"), None)
        return lambda p: tagging_metrics(p.predictions, p.label_ids, outside)
    raw, cols = data.raw[split], data.columns
    contexts = list(raw[cols["context"]])
    references = [answers["text"] for answers in raw[cols["answers"]]]
    examples, offsets = data.qa_side[split]

    def qa(p):
        start_logits, end_logits = p.predictions
        answers = postprocess_qa(contexts, examples, offsets, start_logits, end_logits,
                                 max_answer_length=data.max_answer_length)
        return qa_metrics(answers, references)

    return qa


def _argmax_logits(logits, labels):
    return logits.argmax(-1)


def _auto_interval(total_steps: int, count: int) -> int:
    return max(1, total_steps // count)


def _training_arguments(args: FinetuneArguments, train_size: int, checkpoints: Path):
    import torch
    from transformers import TrainingArguments

    if args.max_steps > 0:
        total = args.max_steps
    else:
        per_epoch = math.ceil(train_size / (args.per_device_train_batch_size * args.gradient_accumulation_steps))
        total = math.ceil(per_epoch * args.num_train_epochs)
    eval_steps = args.eval_steps or _auto_interval(total, 5)
    metric = args.metric_for_best_model or DEFAULT_BEST_METRIC[args.task]
    # seq2seq: the Seq2SeqTrainingArguments of generation at evaluation
    arguments_class = seq2seq.training_arguments if seq2seq.is_seq2seq(args.task) else TrainingArguments
    resumable = args.keep_checkpoints or getattr(args, "resume", None) is not None  # optimizer state kept
    if args.bf16 and (args.use_cpu or not torch.cuda.is_available()):
        from ..machine import warn_if_bf16_slow

        warn_if_bf16_slow("cpu")  # bf16 without AMX is usually slower than fp32: say so, with figures
    return arguments_class(
        output_dir=str(checkpoints), num_train_epochs=args.num_train_epochs, max_steps=args.max_steps,
        per_device_train_batch_size=args.per_device_train_batch_size,
        per_device_eval_batch_size=args.per_device_eval_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate or (5e-4 if args.lora else 5e-5), weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps, lr_scheduler_type=args.lr_scheduler_type,
        eval_strategy=args.eval_strategy, save_strategy=args.eval_strategy, eval_steps=eval_steps,
        save_steps=eval_steps, logging_steps=args.logging_steps or _auto_interval(total, 50),
        load_best_model_at_end=True, metric_for_best_model=metric, greater_is_better=args.greater_is_better,
        save_total_limit=None if args.keep_checkpoints else 2, save_only_model=not resumable, seed=args.seed,
        bf16=args.bf16, use_cpu=args.use_cpu, dataloader_num_workers=args.dataloader_num_workers,
        # pinned memory serves a copy to a GPU; without one torch warns that it is set and unused
        dataloader_pin_memory=torch.cuda.is_available() and not args.use_cpu,
        report_to=args.report_to, disable_tqdm=args.disable_tqdm, remove_unused_columns=False,
        label_names=["start_positions", "end_positions"] if args.task == QUESTION_ANSWERING else ["labels"],
        prediction_loss_only=args.task == CAUSAL_LM,  # SFT evaluates its loss: the (N, V) logits are not kept
    )


def _collator(task: str, tokenizer, padding_free: bool = False):
    from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding, default_data_collator

    if seq2seq.is_seq2seq(task):
        return seq2seq.collator(tokenizer)
    if task == CAUSAL_LM:
        from ..data.sft import DataCollatorForSFT

        pad = next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)  # masked out
        return DataCollatorForSFT(pad, padding_free=padding_free)
    if task == CLASSIFICATION:
        return DataCollatorWithPadding(tokenizer)
    if task == TAGGING:
        return DataCollatorForTokenClassification(tokenizer)
    return default_data_collator  # QA features are padded to max_seq_length already


def _preflight(model, collator, features, task: str) -> None:
    """One forward pass on the two longest training rows, so that a model/data mismatch (too long for the
    position table, token types the model lacks, ...) fails now with a clear message, not mid-training."""
    import torch

    from .batches import to_device

    lengths = [len(ids) for ids in features["input_ids"]]
    longest = sorted(range(len(lengths)), key=lambda i: -lengths[i])[:2]
    batch = collator([features[i] for i in longest])
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(**to_device(batch, model.device))
    except (ValueError, IndexError, RuntimeError) as err:
        raise FinetuneError(f"The model cannot run on the tokenized {task} data (longest rows: {max(lengths)} "
                            f"tokens): {err}") from None
    finally:
        model.train(was_training)


def _majority_baseline(data: _TaskData, split: str) -> float:
    import numpy as np

    train = np.asarray(data.features["train"]["labels"])
    majority = int(np.bincount(train).argmax())
    return float(np.mean(np.asarray(data.features[split]["labels"]) == majority))


card_fields = finetune_card_fields  # the card fields of a run are built in hub.cards; importable here as before


def _prepare_output(args: FinetuneArguments) -> Path:
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise FinetuneError(f"--output_dir {out} is a file, not a folder: choose another path.")
    if out.exists() and any(out.iterdir()) and getattr(args, "resume", None) is None:  # --resume: continue it
        if not args.overwrite_output_dir:
            raise FinetuneError(f"--output_dir {out} exists and is not empty; pass --overwrite_output_dir or "
                                "choose another folder.")
        for name in ("model", "adapter", "merged", "base", "checkpoints", "hub", "log_history.jsonl", "metrics.json"):
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    out.mkdir(parents=True, exist_ok=True)
    return out


LOG_HISTORY = "log_history.jsonl"  # Trainer's log history, one JSON line per record


def finetune(args: FinetuneArguments, *, dataset=None, tokenizer=None) -> FinetuneResult:
    """Finetune a model as `args` says; see the module docstring for what is written where.

    dataset: a `datasets.DatasetDict` (or `Dataset`, used as train) to use instead of `args.dataset`.
    tokenizer: a tokenizer object to use instead of loading or training one.
    Raises `FinetuneError` for bad input, before any training starts, and `NonFiniteLossError` when the
    training loss becomes NaN/inf (with `nan_policy="stop"`, the default; no model is saved then).

    The run's named steps, as pretrain's and distill's: check the settings and the output folder, prepare
    the data, build the model (tokenizer, model, tokenized data, LoRA), train and evaluate, save / publish.
    """
    import transformers

    if args.push_to_hub:  # a bad repo id is refused before training, not after it
        check_repo_id(args.push_to_hub, error=FinetuneError)
    if args.base_model is not None:
        check_model_id(args.base_model, "--base_model", error=FinetuneError)
    requested = args  # what finetune_args.json records (a Hub repo id stays an id)
    args = _resolve_model_source(args)
    if args.arch is not None:
        _scratch_architecture(args)  # fail on an unknown architecture or head before loading any data
    out = _prepare_output(args)
    resume = seq2seq.resume_checkpoint(getattr(args, "resume", None), out / "checkpoints")
    if resume is not None:
        seq2seq.restore_log(resume, out / LOG_HISTORY)
    transformers.set_seed(args.seed)
    data = _prepare_data(args, dataset)
    tokenizer = tokenizer if tokenizer is not None else _load_tokenizer(args, data)
    if args.chat_template is not None:  # used to render the chats, and saved with the tokenizer
        tokenizer.chat_template = _chat_template(args.chat_template)
    model, collator = _build_model(args, data, tokenizer, out)
    if args.compile:  # in place (Trainer, PEFT and the saved model see the plain module): see compiled.compile_model
        from .compiled import compile_model

        try:
            compile_model(model, args.compile_backend)
        except ValueError as err:
            raise FinetuneError(str(err)) from None
    trainer = _build_trainer(args, model, tokenizer, collator, data, out)
    metrics = _train_and_evaluate(trainer, args, data, given_dataset=dataset is not None, resume=resume)
    model, dirs = _save_model(trainer, tokenizer, args, metrics, out)
    hub_folder = None
    if args.push_to_hub:  # the final model (merged with --lora) as a self-contained Hub folder, uploaded
        from .. import hub

        hub_folder = out / "hub"
        hub.publish(model, args.push_to_hub, tokenizer=tokenizer, export_folder=hub_folder, overwrite=True,
                    training_logs=str(out / LOG_HISTORY), **finetune_card_fields(dataclasses.asdict(args), metrics))
    if not args.keep_checkpoints:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    metrics_file = out / "metrics.json"
    metrics_file.write_text(json.dumps(metrics, indent=2) + "\n")
    saved_args = {k: v for k, v in dataclasses.asdict(requested).items()}
    (out / "finetune_args.json").write_text(json.dumps(saved_args, indent=2) + "\n")
    return FinetuneResult(
        metrics=metrics, output_dir=out, **dirs, log_file=out / LOG_HISTORY, metrics_file=metrics_file,
        best_checkpoint=metrics["best_checkpoint"], label_names=data.label_names, hub_folder=hub_folder,
        model=model, tokenizer=tokenizer, trainer=trainer,
    )


def _resolve_model_source(args: FinetuneArguments) -> FinetuneArguments:
    """`args` with --model_name_or_path as a local checkpoint folder (a Hub repo id: its snapshot in the
    Hugging Face cache, downloaded if needed)."""
    if args.model_name_or_path is None:
        return args
    try:
        folder = resolve_checkpoint(args.model_name_or_path, revision=args.revision)
    except CheckpointSourceError as err:
        raise FinetuneError(f"--model_name_or_path {args.model_name_or_path}: {err}") from None
    if not (folder / "config.json").is_file():
        raise FinetuneError(f"--model_name_or_path {args.model_name_or_path} is not a checkpoint folder (no "
                            "config.json there).")
    return dataclasses.replace(args, model_name_or_path=str(folder))


def _prepare_data(args: FinetuneArguments, dataset) -> _TaskData:
    """The task's splits and columns, from `dataset` when given, else from --dataset / the data files."""
    import datasets

    if dataset is None:
        raw = load_finetune_data(args)
    elif isinstance(dataset, datasets.Dataset):
        raw = datasets.DatasetDict({"train": dataset})
    else:
        raw = dataset
    data = _inspect_columns(_standard_splits(_skip_rows_without_text(raw, args), args), args)
    data.max_answer_length = args.max_answer_length
    _subsample(data, args)
    return data


def _build_model(args: FinetuneArguments, data: _TaskData, tokenizer, out: Path):
    """(model, collator): the checkpoint's or a fresh model with the task's head, the data tokenized for
    what it takes (checked by one forward pass), LoRA adapters with --lora."""
    from ..data.tokenizers import fit_tokenizer_to_model

    if args.model_name_or_path is not None:
        model, fresh = _from_checkpoint(args, data)
    else:
        model, fresh = _from_scratch(args, data, tokenizer)
        if args.lora:
            logger.warning("LoRA on a from-scratch (randomly initialised) model trains only adapters and the head; "
                           "its initial weights are saved in %s/base for reloading the adapter.", out)
    _check_vocab(model, tokenizer)
    if seq2seq.is_seq2seq(args.task):
        seq2seq.check_model(model, args)
    fit_tokenizer_to_model(tokenizer, model)  # emit and save only what this model takes (DistilBERT: no token types)
    accepted = set(inspect.signature(model.forward).parameters) & set(MODEL_INPUTS)
    _tokenize(data, tokenizer, args, accepted)
    collator = _collator(args.task, tokenizer, args.padding_free)
    _preflight(model, collator, data.features["train"], args.task)
    if args.load_in_4bit:  # frozen 4-bit base, fp32 norms and embeddings, gradient checkpointing (QLoRA recipe)
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.lora:
        if fresh is None:  # from scratch: the adapter's base is this initialisation, so keep it
            model.save_pretrained(out / "base")
            tokenizer.save_pretrained(out / "base")
            _set_name_or_path(model, out / "base")
        model = apply_lora(model, args.task, r=args.lora_r, alpha=args.lora_alpha, dropout=args.lora_dropout,
                           target_modules=args.lora_target_modules, fresh_modules=fresh)
    return model, collator


def _build_trainer(args: FinetuneArguments, model, tokenizer, collator, data: _TaskData, out: Path):
    """The Trainer, logging to `log_history.jsonl`, checkpointing in `checkpoints/`, and (classification)
    warning when the run stays at chance."""
    callbacks = [_jsonl_callback(out / LOG_HISTORY)]
    compute_metrics = _compute_metrics(args.task, data, "validation", tokenizer, args)
    generates = seq2seq.is_seq2seq(args.task)  # Seq2SeqTrainer: the predictions are generated ids
    logits_for_metrics = None if args.task in (QUESTION_ANSWERING, CAUSAL_LM) or generates else _argmax_logits
    if args.task == CLASSIFICATION:  # warns when the run stays at chance
        callbacks.append(stuck_finetune_callback(len(data.label_names), data.label_names))
        compute_metrics = callbacks[-1].watch(compute_metrics)
    return _trainer(
        args.nan_policy, base=seq2seq.trainer_class(args) if generates else None, model=model,
        args=_training_arguments(args, len(data.features["train"]), out / "checkpoints"),
        train_dataset=data.features["train"], eval_dataset=data.features["validation"],
        processing_class=tokenizer, data_collator=collator,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=logits_for_metrics,
        callbacks=callbacks,
    )


def _train_and_evaluate(trainer, args: FinetuneArguments, data: _TaskData, given_dataset: bool,
                        resume: Path | None = None) -> dict:
    """Train (from the `resume` checkpoint when given), then the metrics of `metrics.json`: train, eval (the best
    checkpoint), test, majority baselines (classification) or copy baselines (seq2seq), the best checkpoint's name
    and the run's provenance."""
    train_output = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    if trainer.skipped_batches:
        train_output.metrics["skipped_batches"] = trainer.skipped_batches
        logger.warning("Skipped %d training batch(es) whose loss was NaN/inf (--nan_policy skip).",
                       trainer.skipped_batches)
    best = trainer.state.best_model_checkpoint
    metrics = {"train": train_output.metrics, "eval": trainer.evaluate()}
    if "test" in data.features:
        trainer.compute_metrics = _compute_metrics(args.task, data, "test", trainer.processing_class, args)
        metrics["test"] = trainer.evaluate(data.features["test"], metric_key_prefix="test")
    if args.task == CAUSAL_LM:
        for prefix in ("eval", "test"):
            if prefix in metrics:
                metrics[prefix][f"{prefix}_perplexity"] = perplexity(metrics[prefix][f"{prefix}_loss"])
    if seq2seq.is_seq2seq(args.task):
        metrics["baseline"] = seq2seq.copy_baseline(data, args)
    if args.task == CLASSIFICATION:
        metrics["baseline"] = {f"{split}_majority_accuracy": _majority_baseline(data, split)
                               for split in ("validation", "test") if split in data.features}
    if data.subsets:
        metrics["subsets"] = data.subsets
    metrics["best_checkpoint"] = Path(best).name if best else None
    metrics["provenance"] = finetune_provenance(dataclasses.asdict(args), given_dataset=given_dataset,
                                                builtin_datasets=BUILTIN_DATASETS)
    return metrics


def _save_model(trainer, tokenizer, args: FinetuneArguments, metrics: dict, out: Path):
    """Write the trained model with its tokenizer: `model/`, or with --lora `adapter/` (+ `merged/` with
    --merge). Returns (the model to publish, its folders as FinetuneResult fields)."""
    model = trainer.model
    dirs = dict(model_dir=None, adapter_dir=None, merged_dir=None)
    if args.lora:
        adapter_dir = dirs["adapter_dir"] = out / "adapter"
        model.save_pretrained(adapter_dir)
        name_base_model_in_adapter_card(adapter_dir, metrics["provenance"]["base_model"])
        base = model.get_base_model()
        base.config.architectures = [type(base).__name__]  # the head class, not the checkpoint's
        _head_config(base.config).save_pretrained(adapter_dir)  # so load_adapter_model rebuilds this head
        tokenizer.save_pretrained(adapter_dir)
        if args.merge:
            # 4-bit: the adapters go into a full-precision copy of the base (the checkpoint's own weights), not
            # into the NF4 ones, which merging would dequantize with their rounding error and quantize again.
            model = (load_adapter_model(adapter_dir) if args.load_in_4bit else model).merge_and_unload()
            merged_dir = dirs["merged_dir"] = out / "merged"
            model.save_pretrained(merged_dir)
            tokenizer.save_pretrained(merged_dir)
    else:
        model_dir = dirs["model_dir"] = out / "model"
        trainer.save_model(str(model_dir))
        tokenizer.save_pretrained(model_dir)
    return model, dirs
