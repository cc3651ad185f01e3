"""Generation finetuning of encoder-decoders: `finetune(task="seq2seq")`, `hf-xfmr finetune --task seq2seq`.

Any architecture whose registry record has a seq2seq-LM head (`ForConditionalGeneration`: T5, BART, and each
family added later) is finetuned on source -> target texts (`hf_xfmr.data.seq2seq`: the columns, tokenization,
collator, copy baseline). The task names and what they set:

| --task          | default metric for the best checkpoint | columns found by name                          |
|-----------------|----------------------------------------|------------------------------------------------|
| `seq2seq`       | `rougeL`                               | document/article/source/text -> summary/...    |
| `summarization` | `rougeL`                               | the same                                       |
| `translation`   | `bleu`                                 | `translation` dicts, --source_lang/--target_lang |

Training is transformers' seq2seq path: `Seq2SeqTrainingArguments(predict_with_generate=True)` and a
`Seq2SeqTrainer` whose every evaluation generates (`--num_beams`, `--max_new_tokens`, default
--max_target_length) and scores the decoded texts against the split's raw targets: ROUGE-1/2/L F-measures
(`rouge_score`, stemmed, x100) and corpus BLEU (`sacrebleu`), plus `gen_len` (mean generated tokens). Beside them,
`metrics.json` reports the copy baseline of each evaluated split (`<split>_copy_rouge*`, `<split>_copy_bleu`: the
first k words of the source, k = the mean target length in words of the training split).

LoRA targets the projections (`DEFAULT_LORA_TARGETS`) with PEFT's SEQ_2_SEQ_LM task; the LM head is the pretrained
one (tied to the embeddings in T5 v1.0 and BART) and stays frozen, as a causal LM's.

`finetune.py` calls the functions here at each step of its run where the task differs; nothing here imports its
private names. The options are `FinetuneArguments` fields (`source_column` ... `max_new_tokens`).
"""

import copy
import json
import re
from pathlib import Path

from .arguments import FinetuneArguments
from .finetune_tasks import SEQ2SEQ, SEQ2SEQ_TASKS, SUMMARIZATION, TRANSLATION, FinetuneError

REGISTRY_TASK = "seq2seq-lm"  # the registry's name of the head every seq2seq task trains
DEFAULT_METRIC = {SEQ2SEQ: "rougeL", SUMMARIZATION: "rougeL", TRANSLATION: "bleu"}
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


def is_seq2seq(task: str) -> bool:
    return task in SEQ2SEQ_TASKS


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

def find_columns(columns: list[str], args: FinetuneArguments) -> dict:
    """{"source": column, "target": column} (the same column for translation dicts)."""
    found = _columns(columns, args)
    return {"source": found.source, "target": found.target}


def _columns(columns, args: FinetuneArguments):
    from ..data.seq2seq import Seq2SeqDataError, seq2seq_columns

    try:
        return seq2seq_columns(columns, source_column=args.source_column, target_column=args.target_column,
                               source_lang=args.source_lang, target_lang=args.target_lang)
    except Seq2SeqDataError as err:
        raise FinetuneError(str(err)) from None


def columns_of(found: dict, args: FinetuneArguments):
    """The `data.seq2seq.Seq2SeqColumns` of the columns `find_columns` found."""
    from ..data.seq2seq import Seq2SeqColumns

    translation = args.source_lang is not None
    return Seq2SeqColumns(found["source"], found["target"], args.source_lang if translation else None,
                          args.target_lang if translation else None)


def rows_without_text(split, args: FinetuneArguments, split_name: str) -> list[int]:
    """Rows of `split` without a source or target text (skipped); a FinetuneError for values of the wrong kind."""
    from ..data.seq2seq import Seq2SeqDataError, rows_without_text as missing_rows

    try:
        return missing_rows(split, columns_of(find_columns(split.column_names, args), args), split_name)
    except Seq2SeqDataError as err:
        raise FinetuneError(str(err)) from None


def sources_and_targets(data, split: str, args: FinetuneArguments) -> tuple[list[str], list[str]]:
    raw = data.raw[split]
    columns = columns_of(data.columns, args)
    return columns.texts({columns.source: raw[columns.source], columns.target: raw[columns.target]})


def training_texts(data, args: FinetuneArguments) -> list[str]:
    """The texts a tokenizer trained from scratch learns from: every training source and target."""
    sources, targets = sources_and_targets(data, "train", args)
    return sources + targets


def tokenize(data, tokenizer, args: FinetuneArguments, max_length: int) -> None:
    """`data.features[split]`: input_ids, attention_mask, labels of every split (`data.seq2seq.tokenize_seq2seq`)."""
    from ..data.seq2seq import tokenize_seq2seq

    if tokenizer.eos_token_id is None:
        raise FinetuneError(f"{type(tokenizer).__name__} has no end-of-sequence token, so generation could not learn "
                            "where a target ends: use the tokenizer the encoder-decoder was trained with.")
    kwargs = dict(tokenizer=tokenizer, columns=columns_of(data.columns, args), source_prefix=args.source_prefix,
                  max_length=max_length, max_target_length=args.max_target_length)
    for split_name, split in data.raw.items():
        features = split.map(tokenize_seq2seq, fn_kwargs=kwargs, batched=True, remove_columns=split.column_names,
                             desc=f"tokenizing {split_name}")
        data.features[split_name] = features


def collator(tokenizer):
    from ..data.seq2seq import DataCollatorForSeq2SeqFinetuning

    return DataCollatorForSeq2SeqFinetuning(tokenizer.pad_token_id)


def check_model(model, args: FinetuneArguments) -> None:
    """An encoder-decoder with a start token for its decoder: what generation finetuning needs."""
    config = model.config
    if not getattr(config, "is_encoder_decoder", False):
        raise FinetuneError(f"--task {args.task} finetunes an encoder-decoder; {type(model).__name__} is not one.")
    if getattr(config, "decoder_start_token_id", None) is None:
        raise FinetuneError(f"{type(model).__name__}'s config has no decoder_start_token_id, so its decoder has no "
                            "first input: set it in the checkpoint's config.json (T5: the pad id; BART: the </s> id).")


def model_class_error(err: Exception, args: FinetuneArguments) -> FinetuneError:
    """The error for an architecture without a seq2seq-LM head (a decoder-only or encoder-only model)."""
    from hf_xfmr.models.registry import architectures

    able = ", ".join(a.name for a in architectures() if REGISTRY_TASK in a.classes)
    return FinetuneError(f"Cannot finetune for --task {args.task}: {err} Generation finetuning needs an "
                         f"encoder-decoder with a seq2seq-LM head: {able}.")


# ---------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------

def generation_kwargs(args: FinetuneArguments) -> dict:
    return {"max_new_tokens": args.max_new_tokens or args.max_target_length, "num_beams": args.num_beams}


def training_arguments(**kwargs):
    """transformers' `Seq2SeqTrainingArguments` with generation at evaluation (`predict_with_generate`)."""
    from transformers import Seq2SeqTrainingArguments

    return Seq2SeqTrainingArguments(predict_with_generate=True, **kwargs)


def trainer_class(args: FinetuneArguments):
    """A `Seq2SeqTrainer` whose evaluations generate with --num_beams and --max_new_tokens: the model's generation
    config gets them, so the model also generates that way once saved."""
    from transformers import Seq2SeqTrainer

    settings = generation_kwargs(args)

    class GenerationTrainer(Seq2SeqTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            model = self._generating_model()
            config = copy.deepcopy(model.generation_config)
            config.update(**settings)
            config._from_model_config = False  # a config of its own, saved with the model
            model.generation_config = config

        def _generating_model(self):
            return self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model

        def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
            # Seq2SeqTrainer writes generate()'s defaults (max_length=20, ...) into the model's generation config,
            # which would then clash with max_new_tokens and be saved: it writes them into a copy.
            target = self._generating_model()
            kept = target.generation_config
            target.generation_config = copy.deepcopy(kept)
            try:
                return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys, **gen_kwargs)
            finally:
                target.generation_config = kept

    return GenerationTrainer


def decode(tokenizer, token_ids) -> list[str]:
    """Generated ids (N, L), padded with -100 across batches by Trainer, as texts without special tokens."""
    import numpy as np

    ids = np.asarray(token_ids)
    ids = np.where(ids < 0, tokenizer.pad_token_id, ids)
    return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def generation_scores(predictions: list[str], references: list[str]) -> dict:
    """ROUGE-1/2/L F-measures (`rouge_score`, Porter-stemmed, mean over rows) and corpus BLEU (`sacrebleu`), all
    on a 0-100 scale."""
    try:
        import sacrebleu
        from rouge_score import rouge_scorer
    except ImportError:
        raise FinetuneError("Seq2seq metrics need rouge_score and sacrebleu: pip install 'hf_xfmr[seq2seq]'.") from None
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references.")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for prediction, reference in zip(predictions, references):
        for name, score in scorer.score(reference, prediction).items():
            totals[name] += score.fmeasure
    scores = {name: 100 * total / max(len(predictions), 1) for name, total in totals.items()}
    scores["bleu"] = float(sacrebleu.corpus_bleu(predictions, [references]).score)
    return scores


def compute_metrics(data, split: str, tokenizer, args: FinetuneArguments):
    """Trainer's `compute_metrics` for `split`: the generated ids decoded and scored against the split's targets
    (the raw texts, not the truncated labels), plus the mean generated length."""
    import numpy as np

    _, references = sources_and_targets(data, split, args)

    def metrics(prediction):
        ids = np.asarray(prediction.predictions)
        texts = decode(tokenizer, ids)
        scores = generation_scores(texts, references)
        special = [i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None]
        real = (ids >= 0) & ~np.isin(ids, special)
        scores["gen_len"] = float(real.sum(axis=1).mean()) if len(ids) else 0.0
        return scores

    return metrics


def copy_baseline(data, args: FinetuneArguments) -> dict:
    """`<split>_copy_<metric>` of the copy-the-first-words baseline on validation and test, and `copy_words` (k)."""
    from ..data.seq2seq import copy_first_words, mean_words

    k = mean_words(sources_and_targets(data, "train", args)[1])
    out = {"copy_words": k}
    for split in ("validation", "test"):
        if split in data.raw:
            sources, targets = sources_and_targets(data, split, args)
            scores = generation_scores(copy_first_words(sources, k), targets)
            out.update({f"{split}_copy_{name}": value for name, value in scores.items()})
    return out


# ---------------------------------------------------------------------------------------------
# Resuming a run (every task)
# ---------------------------------------------------------------------------------------------

def resume_checkpoint(resume: str | None, checkpoints: Path) -> Path | None:
    """The checkpoint folder `--resume` names ("latest": the newest in `checkpoints`), checked to hold what an
    exact resume needs (the optimizer, scheduler and RNG states next to the weights); None without --resume."""
    if resume is None:
        return None
    if resume == "latest":
        found = sorted((p for p in checkpoints.glob("checkpoint-*") if CHECKPOINT.search(p.name)),
                       key=lambda p: int(CHECKPOINT.search(p.name).group(1)))
        if not found:
            raise FinetuneError(f"--resume: no checkpoint in {checkpoints} to continue from; run without --resume.")
        folder = found[-1]
    else:
        folder = Path(resume)
        if not (folder / "trainer_state.json").is_file():
            raise FinetuneError(f"--resume {resume}: not a Trainer checkpoint folder (no trainer_state.json there).")
    if not (folder / "optimizer.pt").is_file():
        raise FinetuneError(f"--resume: {folder} holds the weights only (no optimizer state), so training cannot "
                            "continue exactly; checkpoints keep it when the run has --keep_checkpoints.")
    return folder


def restore_log(checkpoint: Path, log_file: Path) -> None:
    """Rewrite the JSON-lines log as it was at `checkpoint` (later lines of the interrupted run go; the resumed
    run appends its own)."""
    history = json.loads((checkpoint / "trainer_state.json").read_text()).get("log_history", [])
    log_file.write_text("".join(json.dumps(entry) + "\n" for entry in history))

