"""What each finetuning task needs besides the model: labels, tokenization, metrics, QA post-processing.

The tasks, named as in the model registry where they train one of its heads:
    sequence-classification   one label per text (or text pair): accuracy and macro-F1
    token-classification      one tag per word: token-level accuracy and F1
    question-answering        an answer span inside a context (SQuAD format): exact match and F1
    causal-lm                 supervised finetuning (SFT) of a decoder on chats, prompt/completion pairs or
                              texts (`hf_xfmr.data.sft`): evaluation loss and perplexity
    seq2seq                   generation finetuning of an encoder-decoder (`ForConditionalGeneration`) on
                              source/target texts, `summarization` and `translation` its aliases with their
                              defaults (`training.finetune_seq2seq`): ROUGE and BLEU of generated texts

Everything here is plain Python/numpy on `datasets` rows; `finetune.py` wires it into a `Trainer`.
User mistakes (a missing column, unlabelled rows, an answer that is not in its context) raise
`FinetuneError` with a message that says what is wrong and which option fixes it; rows without text
(empty cells) are found by `rows_without_text` and skipped by the caller, which logs how many.
"""

import collections
import math
import re
import string
from typing import Sequence

import numpy as np

IGNORE_INDEX = -100
CLASSIFICATION = "sequence-classification"
TAGGING = "token-classification"
QUESTION_ANSWERING = "question-answering"
CAUSAL_LM = "causal-lm"  # SFT: any architecture with a causal-LM head
SEQ2SEQ = "seq2seq"  # summarization / translation: any architecture with a seq2seq-LM head
SUMMARIZATION, TRANSLATION = "summarization", "translation"  # SEQ2SEQ with the defaults of each
SEQ2SEQ_TASKS = (SEQ2SEQ, SUMMARIZATION, TRANSLATION)
FINETUNE_TASKS = (CLASSIFICATION, TAGGING, QUESTION_ANSWERING, CAUSAL_LM, *SEQ2SEQ_TASKS)

# Column names tried, in order, when the user names none.
TEXT_COLUMNS = ("text", "sentence", "sentence1", "content", "review", "document")
LABEL_COLUMNS = ("label", "labels", "class", "target")
TOKENS_COLUMNS = ("tokens", "words")
TAGS_COLUMNS = ("ner_tags", "tags", "labels", "pos_tags", "chunk_tags")
# Model inputs a finetuning batch may hold; the model's forward signature picks among them.
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "labels", "start_positions", "end_positions")


class FinetuneError(ValueError):
    """Bad input to finetuning: the message names the argument, what is wrong and how to fix it."""


# ---------------------------------------------------------------------------------------------
# Columns and labels
# ---------------------------------------------------------------------------------------------

def pick_column(columns: Sequence[str], given: str | None, candidates: Sequence[str], what: str, option: str) -> str:
    """`given` if it is a column, else the first candidate present; a FinetuneError otherwise."""
    if given is not None:
        if given not in columns:
            raise FinetuneError(f"--{option}: column {given!r} is not in the dataset (columns: {', '.join(columns)}).")
        return given
    for name in candidates:
        if name in columns:
            return name
    raise FinetuneError(
        f"Cannot tell which column holds the {what}: none of {', '.join(candidates)} is in the dataset "
        f"(columns: {', '.join(columns)}). Name it with --{option}."
    )


def rows_without_text(split, columns: dict[str, str], split_name: str, *, word_lists: bool = False) -> list[int]:
    """Indices of the rows of `split` with no value in one of the text columns (an empty CSV cell reads as
    None). `columns` maps each column to the option that names it; a column of other values (numbers, or
    lists where text is expected) is a FinetuneError naming that option.
    `word_lists`: the columns hold one list of words per row (token classification)."""
    missing = set()
    for column, option in columns.items():
        for index, value in enumerate(split[column]):
            if value is None:
                missing.add(index)
            elif not isinstance(value, list if word_lists else str):
                expected = "a list of words" if word_lists else "text"
                raise FinetuneError(f"Split {split_name!r} row {index}: column {column!r} holds "
                                    f"{type(value).__name__} values (e.g. {value!r:.60}), not {expected}; name the "
                                    f"column that holds it with --{option}.")
    return sorted(missing)


def _names_of(feature) -> list[str] | None:
    """Label names of a `datasets.ClassLabel` feature (or of a Sequence/List of them), else None."""
    import datasets

    if isinstance(feature, datasets.ClassLabel):
        return list(feature.names)
    inner = getattr(feature, "feature", None)  # Sequence(ClassLabel) / List(ClassLabel)
    if isinstance(inner, datasets.ClassLabel):
        return list(inner.names)
    return None


def _check_label_value(value, column: str, split: str):
    if value is None:
        raise FinetuneError(f"Split {split!r} has rows without a label in column {column!r}; every row needs one.")
    if isinstance(value, (list, tuple, dict)):
        raise FinetuneError(
            f"Column {column!r} holds {type(value).__name__} values; sequence classification needs one label per "
            "row (multi-label classification is not supported)."
        )
    if isinstance(value, float) and not value.is_integer():
        raise FinetuneError(
            f"Column {column!r} holds non-integer numbers (e.g. {value}); finetuning here is classification: "
            "use class ids or names (regression is not supported)."
        )


def label_mapping(dataset, column: str, *, per_token: bool = False) -> tuple[list[str], dict]:
    """(names, lookup) for a DatasetDict label column: lookup maps the column's values to ids 0..K-1.

    A `ClassLabel` column keeps its names and ids. Otherwise the label set is the sorted distinct values
    of the training split (so ids 0..K-1 keep their order), and values of other splits must occur there.
    `per_token`: the column holds one list of tags per row (token classification).
    """
    train = dataset["train"]
    names = _names_of(train.features[column])
    if names is not None:
        return names, {i: i for i in range(len(names))}

    def values(split_name):
        rows = dataset[split_name][column]
        if per_token:
            for row in rows:
                if not isinstance(row, (list, tuple)):
                    raise FinetuneError(f"Split {split_name!r}: column {column!r} must hold one list of tags per "
                                        f"row, got {row!r:.80}.")
            rows = [v for row in rows for v in row]
        for v in rows:
            _check_label_value(v, column, split_name)
        return set(rows)

    seen = values("train")
    kinds = {str if isinstance(v, str) else int for v in seen}
    if len(kinds) > 1:
        raise FinetuneError(f"Column {column!r} mixes label names and numbers; use one kind.")
    for split_name in dataset:
        if split_name != "train":
            unknown = values(split_name) - seen
            if unknown:
                raise FinetuneError(
                    f"Split {split_name!r} has label(s) {sorted(unknown)[:10]} in column {column!r} that never occur "
                    "in the training split; the model cannot learn them. Fix the data or move those rows to train."
                )
    ordered = sorted(seen)
    if len(ordered) < 2 and not per_token:
        raise FinetuneError(f"Column {column!r} has a single label value {ordered}; classification needs at least two.")
    names = [str(int(v)) if isinstance(v, float) else str(v) for v in ordered]
    return names, {v: i for i, v in enumerate(ordered)}


# ---------------------------------------------------------------------------------------------
# Tokenization
# ---------------------------------------------------------------------------------------------

def tokenize_classification(batch, tokenizer, text_column, pair_column, label_column, lookup, max_length):
    texts = batch[text_column]
    pairs = batch[pair_column] if pair_column else None
    encoded = tokenizer(texts, pairs, truncation=True, max_length=max_length)
    encoded["labels"] = [lookup[v] for v in batch[label_column]]
    return encoded


def tokenize_tagging(batch, tokenizer, tokens_column, tags_column, lookup, max_length, label_all_tokens):
    """Word-level tags onto sub-word tokens: the first piece of each word carries its tag, the other
    pieces carry -100 (or the same tag with `label_all_tokens`), special tokens -100."""
    encoded = tokenizer(batch[tokens_column], is_split_into_words=True, truncation=True, max_length=max_length)
    all_labels = []
    for i, tags in enumerate(batch[tags_column]):
        if len(tags) != len(batch[tokens_column][i]):
            raise FinetuneError(
                f"Row with tokens {batch[tokens_column][i][:8]}...: {len(batch[tokens_column][i])} tokens but "
                f"{len(tags)} tags in {tags_column!r}; each word needs exactly one tag."
            )
        previous = None
        labels = []
        for word in encoded.word_ids(i):
            if word is None:
                labels.append(IGNORE_INDEX)
            elif word != previous or label_all_tokens:
                labels.append(lookup[tags[word]])
            else:
                labels.append(IGNORE_INDEX)
            previous = word
        all_labels.append(labels)
    encoded["labels"] = all_labels
    return encoded


def check_answers(dataset, answers_column: str, context_column: str, split: str) -> None:
    """SQuAD format: answers = {"text": [...], "answer_start": [...]}, each text found at its start."""
    for index, (answers, context) in enumerate(zip(dataset[answers_column], dataset[context_column])):
        if not isinstance(answers, dict) or "text" not in answers or "answer_start" not in answers:
            raise FinetuneError(
                f"Split {split!r} row {index}: column {answers_column!r} must hold SQuAD-style answers "
                f"{{'text': [...], 'answer_start': [...]}}, got {answers!r:.120}. (CSV cannot hold this; use JSON "
                "or parquet.)"
            )
        if len(answers["text"]) != len(answers["answer_start"]):
            raise FinetuneError(f"Split {split!r} row {index}: {answers_column!r} has a different number of texts "
                                "and answer_start offsets.")
        for text, start in zip(answers["text"], answers["answer_start"]):
            if context[start:start + len(text)] != text:
                raise FinetuneError(
                    f"Split {split!r} row {index}: answer {text!r} is not at character {start} of its context "
                    f"(found {context[start:start + len(text)]!r}); answer_start must index into {context_column!r}."
                )


def _qa_encode(batch, tokenizer, question_column, context_column, max_length, stride):
    # Tokenizers that pad on the left (XLNet) put the context first so truncation trims its end.
    question_first = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in batch[question_column]]
    contexts = batch[context_column]
    encoded = tokenizer(
        questions if question_first else contexts, contexts if question_first else questions,
        truncation="only_second" if question_first else "only_first", max_length=max_length, stride=stride,
        return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length",
    )
    return encoded, 1 if question_first else 0


def tokenize_qa(batch, indices, tokenizer, question_column, context_column, answers_column, max_length, stride):
    """Features for extractive QA: long contexts become several overlapping windows (`stride` tokens of
    overlap). Each window gets start/end token positions of the first answer, or the [CLS] position when
    the answer is not inside it. Also returns, per feature, its example index and the offsets of its
    context tokens (None elsewhere), which evaluation needs to map predictions back to text.
    `indices`: the rows' indices in their split (`Dataset.map(..., with_indices=True)`)."""
    encoded, context_id = _qa_encode(batch, tokenizer, question_column, context_column, max_length, stride)
    sample_map = encoded.pop("overflow_to_sample_mapping")
    starts, ends, example_ids, offsets_out = [], [], [], []
    cls_id = tokenizer.cls_token_id
    for i, offsets in enumerate(encoded["offset_mapping"]):
        sample = sample_map[i]
        sequence_ids = encoded.sequence_ids(i)
        input_ids = encoded["input_ids"][i]
        cls_index = input_ids.index(cls_id) if cls_id in input_ids else 0
        context_tokens = [k for k, s in enumerate(sequence_ids) if s == context_id]
        answers = batch[answers_column][sample]
        start = end = cls_index
        if answers["text"] and context_tokens:
            char_start = answers["answer_start"][0]
            char_end = char_start + len(answers["text"][0])
            first, last = context_tokens[0], context_tokens[-1]
            if offsets[first][0] <= char_start and offsets[last][1] >= char_end:
                start = next(k for k in context_tokens if offsets[k][1] > char_start)
                end = max(k for k in context_tokens if offsets[k][0] < char_end)
        starts.append(start)
        ends.append(end)
        example_ids.append(indices[sample])
        offsets_out.append([tuple(o) if s == context_id else None for o, s in zip(offsets, sequence_ids)])
    encoded.pop("offset_mapping")
    encoded["start_positions"] = starts
    encoded["end_positions"] = ends
    encoded["example_index"] = example_ids
    encoded["context_offsets"] = offsets_out
    return encoded


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------

def _f1_per_class(predictions: np.ndarray, labels: np.ndarray, classes) -> list[float]:
    scores = []
    for c in classes:
        tp = int(np.sum((predictions == c) & (labels == c)))
        fp = int(np.sum((predictions == c) & (labels != c)))
        fn = int(np.sum((predictions != c) & (labels == c)))
        scores.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return scores


def classification_metrics(predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """accuracy, and f1 = macro-average over the classes present in labels or predictions."""
    predictions, labels = np.asarray(predictions).reshape(-1), np.asarray(labels).reshape(-1)
    classes = np.union1d(np.unique(labels), np.unique(predictions))
    return {
        "accuracy": float(np.mean(predictions == labels)) if labels.size else 0.0,
        "f1": float(np.mean(_f1_per_class(predictions, labels, classes))) if labels.size else 0.0,
    }


def tagging_metrics(predictions: np.ndarray, labels: np.ndarray, outside_id: int | None) -> dict[str, float]:
    """Token-level metrics over labelled positions (label != -100):
    accuracy; f1 = micro-F1 of the non-outside tags when the tag set has an outside tag ("O": a token
    counts as a true positive when its predicted tag equals its gold non-O tag), else macro-F1; macro_f1."""
    predictions, labels = np.asarray(predictions).reshape(-1), np.asarray(labels).reshape(-1)
    keep = labels != IGNORE_INDEX
    predictions, labels = predictions[keep], labels[keep]
    if labels.size == 0:
        return {"accuracy": 0.0, "f1": 0.0, "macro_f1": 0.0}
    macro = classification_metrics(predictions, labels)
    f1 = macro["f1"]
    if outside_id is not None:
        tp = int(np.sum((predictions == labels) & (labels != outside_id)))
        predicted = int(np.sum(predictions != outside_id))
        gold = int(np.sum(labels != outside_id))
        f1 = 0.0 if tp == 0 else 2 * tp / (predicted + gold)
    return {"accuracy": macro["accuracy"], "f1": float(f1), "macro_f1": macro["f1"]}


def perplexity(loss: float) -> float:
    """exp(mean next-token cross-entropy in nats): the perplexity a causal LM's evaluation loss stands for
    (inf past float range)."""
    return math.exp(loss) if loss < 709 else math.inf


def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def answer_f1(prediction: str, truth: str) -> float:
    """Word-overlap F1 between normalised answers (SQuAD's definition)."""
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred or not gold:
        return float(pred == gold)
    common = sum((collections.Counter(pred) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def qa_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """exact_match and f1 (in %, as SQuAD reports them), each the best over an example's gold answers."""
    em = f1 = 0.0
    for prediction, golds in zip(predictions, references):
        golds = list(golds) or [""]
        em += max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds)
        f1 += max(answer_f1(prediction, g) for g in golds)
    n = max(len(predictions), 1)
    return {"exact_match": 100 * em / n, "f1": 100 * f1 / n}


def postprocess_qa(contexts: Sequence[str], feature_examples: Sequence[int], feature_offsets, start_logits,
                   end_logits, n_best: int = 20, max_answer_length: int = 30) -> list[str]:
    """The best answer text per example (one entry per context, in order).

    For each feature, the `n_best` highest start and end logits form candidate spans; a span is valid when
    both ends are context tokens, end >= start and it is at most `max_answer_length` tokens long. Its
    score is start logit + end logit; an example takes its best span over all its features ("" if none).
    """
    best: dict[int, tuple[float, str]] = {}
    for feature, example in enumerate(feature_examples):
        offsets = feature_offsets[feature]
        starts, ends = np.asarray(start_logits[feature]), np.asarray(end_logits[feature])
        length = len(offsets)  # logits may be longer when batches were padded
        top_starts = np.argsort(starts[:length])[::-1][:n_best]
        top_ends = np.argsort(ends[:length])[::-1][:n_best]
        for s in top_starts:
            if offsets[s] is None:
                continue
            for e in top_ends:
                if offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(starts[s] + ends[e])
                if example not in best or score > best[example][0]:
                    best[example] = (score, contexts[example][offsets[s][0]:offsets[e][1]])
    return [best.get(i, (0.0, ""))[1] for i in range(len(contexts))]
