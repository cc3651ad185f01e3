"""Corpora: an embedded English corpus that needs no download, and any `datasets` source.

`default_corpus()` reads text that ships with every CPython install: the language reference and
library topics of `pydoc_data.topics` (what `help('topics')` shows) and the docstrings of a fixed
list of standard-library modules. It is deterministic for a given Python version; about 0.5-1 MB
of text, enough for tokenizer training, demos and tests.
"""

import importlib
import inspect
import os
import re
from collections.abc import Iterable, Iterator

# Pure-Python stdlib modules with substantial docstrings and no import-time side effects.
_STDLIB_MODULES = (
    "argparse", "ast", "base64", "bisect", "calendar", "collections", "configparser", "contextlib",
    "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email.message", "enum",
    "fractions", "functools", "gettext", "heapq", "html.parser", "http.client", "inspect",
    "ipaddress", "json", "logging", "mailbox", "operator", "optparse", "os", "pathlib", "pickle",
    "pprint", "queue", "random", "shlex", "shutil", "statistics", "string", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "typing", "unittest.case",
    "urllib.parse", "uuid", "warnings", "weakref", "zipfile",
)


def _paragraphs(text: str) -> list[str]:
    """Split on blank lines and collapse whitespace inside each paragraph."""
    paras = (re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text))
    return [p for p in paras if len(p) > 1]


def _module_docs(name: str) -> list[list[str]]:
    try:
        module = importlib.import_module(name)
    except Exception:  # a trimmed Python install may lack a module; skip it
        return []
    docs = []
    if module.__doc__:
        docs.append(_paragraphs(module.__doc__))
    for attr in sorted(vars(module)):
        if attr.startswith("_"):
            continue
        obj = getattr(module, attr)
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            doc = inspect.getdoc(obj)
            if doc and len(doc) > 80:
                docs.append(_paragraphs(doc))
    return docs


def default_corpus(max_documents: int | None = None) -> list[list[str]]:
    """The embedded corpus: a list of documents, each a list of paragraphs (strings).

    Documents come in a fixed order (pydoc topics sorted by name, then module docstrings), so the
    same Python version always yields the same corpus.
    """
    import pydoc_data.topics

    docs = [_paragraphs(pydoc_data.topics.topics[k]) for k in sorted(pydoc_data.topics.topics)]
    for name in _STDLIB_MODULES:
        docs.extend(_module_docs(name))
    docs = [d for d in docs if d]
    return docs[:max_documents] if max_documents is not None else docs


def document_text(doc) -> str:
    """A document given as a string or as a list of paragraphs, as one string."""
    return doc if isinstance(doc, str) else "\n\n".join(doc)


_EXTENSION_BUILDERS = {".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json",
                       ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


def load_corpus(source=None, *, split: str = "train", text_column: str = "text", streaming: bool = False,
                max_documents: int | None = None, **load_kwargs):
    """Load a text corpus as a `datasets.Dataset` (or `IterableDataset` when streaming) with a `text` column.

    source:
        None or "default": the embedded corpus (one row per document, paragraphs joined by blank lines);
        a list of strings / of paragraph lists: those documents;
        a local file, glob or directory of .txt/.json(l)/.parquet/.csv files;
        a `datasets.Dataset`/`IterableDataset`/`DatasetDict`;
        anything else: a dataset name for `datasets.load_dataset` (needs network unless cached).
    text_column: the column holding the text; renamed to "text".
    """
    import datasets

    if source is None or (isinstance(source, str) and source == "default"):
        source = default_corpus(max_documents)
    if isinstance(source, (list, tuple)):
        texts = [document_text(d) for d in source]
        ds = datasets.Dataset.from_dict({"text": texts})
        if streaming:
            ds = ds.to_iterable_dataset()
    elif isinstance(source, (datasets.Dataset, datasets.IterableDataset, datasets.DatasetDict,
                             datasets.IterableDatasetDict)):
        ds = source
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isdir(path):
            files = sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs
                           if os.path.splitext(f)[1] in _EXTENSION_BUILDERS)
            if not files:
                raise ValueError(f"Corpus directory {path!r} holds no .txt/.json/.jsonl/.parquet/.csv file.")
            ext = os.path.splitext(files[0])[1]
            ds = datasets.load_dataset(_EXTENSION_BUILDERS[ext], data_files=files, split=split,
                                       streaming=streaming, **load_kwargs)
        elif os.path.splitext(path)[1] in _EXTENSION_BUILDERS and (os.path.exists(path) or "*" in path):
            ds = datasets.load_dataset(_EXTENSION_BUILDERS[os.path.splitext(path)[1]], data_files=path,
                                       split=split, streaming=streaming, **load_kwargs)
        elif os.path.splitext(path)[1] in _EXTENSION_BUILDERS:
            raise ValueError(f"Corpus file {path!r} does not exist.")
        else:
            ds = datasets.load_dataset(path, split=split, streaming=streaming, **load_kwargs)
    else:
        raise ValueError(
            f"Unsupported corpus source of type {type(source).__name__}: pass None (embedded corpus), a list "
            "of texts, a file/directory path, a datasets.Dataset or a dataset name."
        )
    if isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if split not in ds:
            raise ValueError(f"Split {split!r} not found; available splits: {sorted(ds.keys())}.")
        ds = ds[split]
    columns = ds.column_names
    if columns is not None and text_column not in columns:
        raise ValueError(f"Column {text_column!r} not found in the corpus (columns: {columns}); name the text column "
                         "with --text_column (Python: text_column=).")
    if text_column != "text":
        ds = ds.rename_column(text_column, "text")
    if isinstance(ds, datasets.Dataset):
        if max_documents is not None:
            ds = ds.select(range(min(max_documents, len(ds))))
        if len(ds) == 0:
            raise ValueError("The corpus is empty (0 documents). Point load_corpus at a non-empty source.")
    elif max_documents is not None:
        ds = ds.take(max_documents)
    return ds


def iter_texts(corpus, batch_size: int = 1000) -> Iterator[list[str]]:
    """Yield batches of strings from a list of documents, a `datasets` corpus, or an iterable of strings.

    A single string is rejected: iterating it would yield one character per "document".
    """
    if isinstance(corpus, (str, bytes)):
        raise ValueError(
            f"The corpus is a single {type(corpus).__name__} ({corpus[:40]!r}), not a collection of texts: "
            "iterating it would train on single characters. Pass a list of texts (e.g. [text] or text.split('\\n\\n')), "
            "or load a file or dataset with hf_xfmr.data.load_corpus(path)."
        )
    try:
        import datasets

        dataset_types = (datasets.Dataset, datasets.IterableDataset)
    except ImportError:  # pragma: no cover
        dataset_types = ()
    if isinstance(corpus, dataset_types):
        source: Iterable = (row["text"] for row in corpus)
    else:
        source = (document_text(d) for d in corpus)
    batch, seen = [], 0
    for text in source:
        if text:
            batch.append(text)
            seen += 1
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch
    if seen == 0:
        raise ValueError("The corpus is empty: no non-empty text to read. Pass documents with text in them.")
