"""Sequence-to-sequence finetuning data for encoder-decoders (summarization, translation): which columns hold the
source and the target, the rows tokenized with labels, a collator that pads them, the copy-the-first-words
baseline, and a small task built from the docstrings of Python's standard library.

Row shapes (`seq2seq_columns` finds the columns by name when they are not named):

| shape        | columns                                                  | source -> target                    |
|--------------|----------------------------------------------------------|-------------------------------------|
| text pairs   | one of SOURCE_COLUMNS and one of TARGET_COLUMNS          | e.g. `document` -> `summary`        |
| translation  | `translation`: {"en": "...", "de": "..."} (the WMT shape)| `source_lang` -> `target_lang` text |

- `tokenize_seq2seq` puts `source_prefix` (T5's task prefixes, e.g. "summarize: ") before each source, cuts the
  sources at `max_length` and the targets at `max_target_length` tokens (the tokenizer's own end token kept),
  and returns `input_ids`, `attention_mask` and `labels` (the target ids).
- `DataCollatorForSeq2SeqFinetuning` right-pads the sources (pad id, attention mask 0) and the labels (-100). It
  builds no decoder inputs: the model reads the labels shifted right (`models.seq2seq.shift_tokens_right`), so the
  decoder keeps the padded layout of pretraining while the encoder unpads its batch (`config.unpad_inputs`).
- `copy_first_words(sources, k)`: the baseline a summarizer has to beat, the first k words of each source.
- Two tasks built from text Python ships, offline and deterministic for a given Python version, each a `DatasetDict`
  (train / validation / test), by name in `BUILTIN_DATASETS` (`builtin_dataset(name)`):

  | name              | function              | source -> target                         | pairs  | copy ROUGE-L |
  |-------------------|-----------------------|------------------------------------------|--------|--------------|
  | html-entities     | html_entity_names()   | HTML entity name -> its character's name | ~2,000 | ~4           |
  | stdlib-docstrings | docstring_summaries() | a docstring's body -> its first line     | ~300   | ~16          |

  Tiny randomly initialised T5, BART and BigBird-Pegasus models trained for a hundred steps (about 20 s of one CPU
  thread each) beat the copy baseline of the first by far (ROUGE-L 26-35 on its test split, against 3.9;
  tests/hub/test_seq2seq_by_id.py), but not that of the second, whose first lines restate their bodies' opening
  words (a tiny T5 reached ROUGE-L 14.4 against 16.5): a random model does not learn to summarize prose from 300
  examples.

Bad rows raise `Seq2SeqDataError` (a ValueError) naming the split, the row and the option that fixes it.
"""

import hashlib
import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass


from .collation import IGNORE_INDEX, pad_ragged

# Column names tried, in order, when the user names none (those of the common summarization sets first:
# CNN/DailyMail's article/highlights, XSum's document/summary, Gigaword's document/summary).
SOURCE_COLUMNS = ("document", "article", "source", "text", "src", "input", "dialogue", "content")
TARGET_COLUMNS = ("summary", "highlights", "target", "tgt", "headline", "title", "output", "abstract")
TRANSLATION_COLUMN = "translation"


class Seq2SeqDataError(ValueError):
    """Seq2seq data that cannot be used as it is: the message says what is wrong and which option fixes it."""


@dataclass(frozen=True)
class Seq2SeqColumns:
    """Where the texts are: `source` and `target` columns of text, or, with `source_lang` / `target_lang` set, one
    column (both names) of translation dicts read by language."""

    source: str
    target: str
    source_lang: str | None = None
    target_lang: str | None = None

    @property
    def translation(self) -> bool:
        return self.source_lang is not None

    def texts(self, batch: dict) -> tuple[list, list]:
        """(sources, targets) of a batch of rows (column -> values); None where a row has no text."""
        if not self.translation:
            return list(batch[self.source]), list(batch[self.target])
        pairs = [pair or {} for pair in batch[self.source]]
        return [p.get(self.source_lang) for p in pairs], [p.get(self.target_lang) for p in pairs]


def _pick(columns: Sequence[str], given: str | None, candidates: Sequence[str], what: str, option: str,
          taken: str | None = None) -> str:
    if given is not None:
        if given not in columns:
            raise Seq2SeqDataError(f"--{option}: column {given!r} is not in the dataset (columns: "
                                   f"{', '.join(columns)}).")
        return given
    found = next((name for name in candidates if name in columns and name != taken), None)
    if found is None:
        raise Seq2SeqDataError(f"Cannot tell which column holds the {what}: none of {', '.join(candidates)} is in "
                               f"the dataset (columns: {', '.join(columns)}). Name it with --{option}.")
    return found


def seq2seq_columns(columns: Sequence[str], *, source_column: str | None = None, target_column: str | None = None,
                    source_lang: str | None = None, target_lang: str | None = None) -> Seq2SeqColumns:
    """The columns of a seq2seq dataset with these `columns`: the ones named, else found by name (SOURCE_COLUMNS,
    TARGET_COLUMNS, or a `translation` column with --source_lang / --target_lang)."""
    languages = source_lang is not None or target_lang is not None
    translation = (source_column or TRANSLATION_COLUMN) if languages else None
    if translation is None and source_column is None and target_column is None and TRANSLATION_COLUMN in columns \
            and not any(name in columns for name in SOURCE_COLUMNS):
        raise Seq2SeqDataError(f"The dataset holds translation pairs (column {TRANSLATION_COLUMN!r}): name the "
                               "languages to translate from and to with --source_lang and --target_lang (e.g. "
                               "--source_lang en --target_lang de).")
    if translation is not None:
        if source_lang is None or target_lang is None or source_lang == target_lang:
            raise Seq2SeqDataError("Translation needs two different languages: pass both --source_lang and "
                                   f"--target_lang (got {source_lang!r} and {target_lang!r}).")
        if target_column is not None and target_column != translation:
            raise Seq2SeqDataError("With --source_lang / --target_lang both texts come from one column of "
                                   "translation dicts: name it with --source_column, not --target_column.")
        column = _pick(columns, translation if source_column else None, (TRANSLATION_COLUMN,),
                       "translation pairs", "source_column")
        return Seq2SeqColumns(column, column, source_lang, target_lang)
    source = _pick(columns, source_column, SOURCE_COLUMNS, "source texts", "source_column", taken=target_column)
    target = _pick(columns, target_column, TARGET_COLUMNS, "target texts", "target_column", taken=source)
    if source == target:
        raise Seq2SeqDataError(f"--source_column and --target_column name the same column {source!r}: the model "
                               "would learn to copy its input. Name two columns.")
    return Seq2SeqColumns(source, target)


def rows_without_text(split, columns: Seq2SeqColumns, split_name: str) -> list[int]:
    """Indices of the rows of `split` with no source or no target text (an empty CSV cell; skipped by the
    caller). A value that is not text, or translation dicts without the languages asked for, is an error."""
    if columns.translation:
        first = next((pair for pair in split[columns.source] if pair), None)
        if first is None:  # every row empty: the caller says so
            return list(range(len(split)))
        if not isinstance(first, dict):
            raise Seq2SeqDataError(f"Split {split_name!r}: column {columns.source!r} holds "
                                   f"{type(first).__name__} values, not translation dicts like "
                                   "{'en': '...', 'de': '...'}; name the column that holds them with --source_column.")
        for lang, option in ((columns.source_lang, "source_lang"), (columns.target_lang, "target_lang")):
            if lang not in first:
                raise Seq2SeqDataError(f"--{option} {lang!r} is not a language of the translation pairs of split "
                                       f"{split_name!r} (languages: {', '.join(map(str, first))}).")
    sources, targets = columns.texts({columns.source: split[columns.source], columns.target: split[columns.target]})
    missing = []
    for index, (source, target) in enumerate(zip(sources, targets)):
        for value, column, option in ((source, columns.source, "source_column"),
                                      (target, columns.target, "target_column")):
            if value is not None and not isinstance(value, str):
                raise Seq2SeqDataError(f"Split {split_name!r} row {index}: column {column!r} holds "
                                       f"{type(value).__name__} values (e.g. {value!r:.60}), not text; name the column "
                                       f"that holds it with --{option}.")
        if not source or not target:
            missing.append(index)
    return missing


def tokenize_seq2seq(batch: dict, *, tokenizer, columns: Seq2SeqColumns, source_prefix: str = "",
                     max_length: int, max_target_length: int) -> dict:
    """A batch of rows -> `input_ids`, `attention_mask` (the prefixed sources) and `labels` (the targets), each cut
    at its length; for `datasets.Dataset.map(batched=True)`."""
    sources, targets = columns.texts(batch)
    encoded = tokenizer([source_prefix + text for text in sources], max_length=max_length, truncation=True)
    labels = tokenizer(text_target=targets, max_length=max_target_length, truncation=True)
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"],
            "labels": labels["input_ids"]}


@dataclass
class DataCollatorForSeq2SeqFinetuning:
    """Rows of `tokenize_seq2seq` -> a right-padded batch: `input_ids` (B, S) padded with `pad_token_id`,
    `attention_mask` (B, S), `labels` (B, T) padded with -100. The model derives its decoder inputs from the
    labels; `pad_to_multiple_of` rounds S and T up (tensor cores)."""

    pad_token_id: int
    pad_to_multiple_of: int | None = None

    def __call__(self, rows: Sequence[dict]) -> dict:
        if not rows:
            raise ValueError("Cannot collate an empty batch: the DataLoader passed no examples.")
        missing = [key for key in ("input_ids", "labels") if key not in rows[0]]
        if missing:
            raise ValueError(f"Seq2seq rows need `input_ids` and `labels` (from `tokenize_seq2seq`); the first row "
                             f"lacks {', '.join(missing)}.")
        multiple = self.pad_to_multiple_of
        input_ids, real = pad_ragged([row["input_ids"] for row in rows], self.pad_token_id,
                                     pad_to_multiple_of=multiple)  # (B, S), (B, S) bool
        labels, _ = pad_ragged([row["labels"] for row in rows], IGNORE_INDEX, pad_to_multiple_of=multiple)  # (B, T)
        return {"input_ids": input_ids, "attention_mask": real.long(), "labels": labels}


# ---------------------------------------------------------------------------------------------
# The copy baseline
# ---------------------------------------------------------------------------------------------

def mean_words(texts: Sequence[str]) -> int:
    """The mean number of words of `texts`, rounded, at least 1."""
    counts = [len(text.split()) for text in texts if text]
    return max(1, round(sum(counts) / len(counts))) if counts else 1


def copy_first_words(sources: Sequence[str], k: int) -> list[str]:
    """The first `k` words of each source: what a summarizer that learned nothing but the targets' length
    answers (k = the mean target length in words, `mean_words`)."""
    return [" ".join(source.split()[:k]) for source in sources]


# ---------------------------------------------------------------------------------------------
# A task from the standard library: docstring body -> its first line
# ---------------------------------------------------------------------------------------------

# Pure-Python modules of the standard library whose public functions and classes carry documented docstrings
# (C modules' docstrings start with a signature line instead of a summary).
DOCSTRING_MODULES = (
    "argparse", "ast", "base64", "bisect", "calendar", "configparser", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "difflib", "email.utils", "enum", "filecmp", "fnmatch", "fractions", "ftplib", "functools",
    "getpass", "gettext", "glob", "gzip", "heapq", "hmac", "html", "http.client", "http.cookies", "imaplib",
    "inspect", "ipaddress", "json", "locale", "logging", "mailbox", "mimetypes", "ntpath", "numbers", "operator",
    "optparse", "os", "pathlib", "pickle", "pkgutil", "platform", "plistlib", "posixpath", "pprint", "queue",
    "quopri", "random", "shlex", "shutil", "smtplib", "socket", "statistics", "string", "subprocess", "tarfile",
    "tempfile", "textwrap", "threading", "tokenize", "traceback", "typing", "urllib.parse", "urllib.request",
    "uuid", "warnings", "wave", "weakref", "zipfile",
)


def _summary_and_body(doc: str) -> tuple[str, str] | None:
    """(first line, the rest as one paragraph of text) of a docstring, or None when it has no usable body."""
    paragraphs = [" ".join(p.split()) for p in doc.strip().split("\n\n")]
    if len(paragraphs) < 2:
        return None
    summary, body = paragraphs[0], " ".join(p for p in paragraphs[1:] if p)
    if not 3 <= len(summary.split()) <= 24 or len(body.split()) < 12 or summary.endswith(":"):
        return None
    if ">>>" in body or "(" in summary.split()[0]:  # doctests, signature lines
        return None
    return summary, " ".join(body.split()[:160])


def _docstring_pairs(modules: Sequence[str]) -> list[dict]:
    rows, seen = [], set()
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a module missing from this Python build: the task is smaller, not broken
            continue
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", None) != module.__name__:  # re-exported from elsewhere
                continue
            pair = _summary_and_body(inspect.getdoc(obj) or "")
            if pair is None or pair[0] in seen:
                continue
            seen.add(pair[0])
            rows.append({"name": f"{module_name}.{name}", "document": pair[1], "summary": pair[0]})
    return rows


def docstring_summaries(modules: Sequence[str] = DOCSTRING_MODULES, *, validation: float = 0.1,
                        test: float = 0.1):
    """A `DatasetDict` of (docstring body -> its first line) pairs from the public functions and classes of
    `modules` (standard-library modules by default: a few hundred pairs), columns `name`, `document`, `summary`.

    Offline and deterministic: the same Python version gives the same pairs and the same splits, each pair placed
    by a hash of its qualified name (validation and test are about the given fractions of the pairs)."""
    import datasets

    if not 0 <= validation < 1 or not 0 <= test < 1 or validation + test >= 1:
        raise ValueError(f"validation ({validation}) and test ({test}) must be fractions in [0, 1) whose sum is < 1.")
    splits: dict[str, list] = {"train": [], "validation": [], "test": []}
    for row in _docstring_pairs(modules):
        draw = int(hashlib.sha256(row["name"].encode()).hexdigest()[:8], 16) / 16 ** 8  # uniform in [0, 1)
        split = "validation" if draw < validation else "test" if draw < validation + test else "train"
        splits[split].append(row)
    if not splits["train"]:
        raise ValueError(f"No docstring pairs in modules {', '.join(modules)}: name modules with documented "
                         "public functions or classes.")
    return datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items() if rows})


# ---------------------------------------------------------------------------------------------
# A task from the standard library: HTML entity name -> the Unicode name of its character
# ---------------------------------------------------------------------------------------------

def _entity_rows() -> list[dict]:
    """One row per HTML5 entity that names a single character Unicode has a name for (`html.entities.html5`, the
    names written with their ';', whose legacy duplicates without it are skipped; `unicodedata.name`)."""
    import html.entities
    import unicodedata

    rows = []
    for key, chars in sorted(html.entities.html5.items()):
        if not key.endswith(";") or len(chars) != 1:  # legacy "amp" beside "amp;"; two-character sequences
            continue
        name = unicodedata.name(chars, None)
        if name is not None:  # control characters have no name
            rows.append({"char": chars, "source": key[:-1], "target": name.lower()})
    return rows


def html_entity_names(*, validation: float = 0.1, test: float = 0.1):
    """A `DatasetDict` of (HTML entity name -> the Unicode name of its character) pairs, e.g. `eacute` -> "latin
    small letter e with acute", `rarr` -> "rightwards arrow", `nsube` -> "neither a subset of nor equal to": every
    HTML5 entity of one named character (`html.entities.html5`, `unicodedata.name`, lowercased), columns `char`,
    `source` and `target`; about 2,000 pairs of 1,400 characters (Python 3.11), 1-12 target words (4 on average).

    A translation-like task a tiny model learns in a hundred steps: the names are regular ("acute", "grave", "arr",
    "fr" for fraktur, "opf" for double-struck, Greek letters by name) but not copies of the source, so copying the
    source's first words scores near zero (ROUGE-L 3.9 on the test split) and always answering the commonest words
    about 13, while a model that reads the source reaches 26-35 (the module docstring).

    Offline and deterministic: the same Python version gives the same pairs and splits. A character goes to one
    split with all its entities (`rarr`, `rightarrow`, `RightArrow`, `srarr`), placed by a hash of the character, so
    the held-out splits ask for characters the training split never names (validation and test are about the given
    fractions of the characters)."""
    import datasets

    if not 0 <= validation < 1 or not 0 <= test < 1 or validation + test >= 1:
        raise ValueError(f"validation ({validation}) and test ({test}) must be fractions in [0, 1) whose sum is < 1.")
    splits: dict[str, list] = {"train": [], "validation": [], "test": []}
    for row in _entity_rows():
        draw = int(hashlib.sha256(row["char"].encode()).hexdigest()[:8], 16) / 16 ** 8  # uniform in [0, 1)
        splits["validation" if draw < validation else "test" if draw < validation + test else "train"].append(row)
    return datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items() if rows})


BUILTIN_DATASETS = {"html-entities": html_entity_names, "stdlib-docstrings": docstring_summaries}


def builtin_dataset(name: str):
    """The `DatasetDict` of a built-in task by its name (`--dataset html-entities`), with its default splits."""
    if name not in BUILTIN_DATASETS:
        raise ValueError(f"{name!r} is not a built-in seq2seq dataset; choose one of {', '.join(BUILTIN_DATASETS)}.")
    return BUILTIN_DATASETS[name]()
