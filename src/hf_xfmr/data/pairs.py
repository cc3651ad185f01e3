"""Sentence-pair examples: BERT next-sentence prediction (NSP) and ALBERT sentence-order prediction (SOP).

Both follow `create_instances_from_document` of the original `create_pretraining_data.py`
(google-research/bert, and its ALBERT variant): walk each document accumulating segments
(sentences) until a target length (the full `max_seq_length - 3`, or with `short_seq_prob` a random
shorter one), split the chunk at a random segment boundary into A and B, truncate the pair
randomly from the front or back, and emit `[CLS] A [SEP] B [SEP]`.

- NSP (BERT, Devlin et al. 2019, sec. 3.1): with p=0.5 (always if the chunk has one segment) B is
  taken from a random other document and `next_sentence_label=1`; the unused segments of the
  chunk are put back. Otherwise B is the true continuation, label 0.
- SOP (ALBERT, Lan et al. 2020, sec. 4.2): B is always the true continuation; with p=0.5 A and B
  are swapped and `sentence_order_label=1`. Deviation: a chunk with a single segment is split
  inside that segment at a random token (the original would draw B from another document).

Examples also carry `token_type_ids` and `special_tokens_mask`; pass them to `DataCollatorForMLM`,
which masks them and passes the label through.
"""

import random
import re
from collections.abc import Sequence

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


def split_sentences(text: str) -> list[str]:
    """A light sentence splitter (period/question/exclamation followed by a capital)."""
    return [s for s in (p.strip() for p in _SENTENCE_END.split(text)) if s]


def tokenize_documents(tokenizer, documents, sentences: bool = True) -> list[list[list[int]]]:
    """Tokenize documents into lists of segments of token ids (no special tokens).

    documents: strings or lists of paragraphs (as `default_corpus()` returns). With `sentences`,
    paragraphs are further split into sentences (the original recipes use sentences).
    """
    out = []
    for doc in documents:
        paras = [doc] if isinstance(doc, str) else list(doc)
        segs = [s for p in paras for s in (split_sentences(p) if sentences else [p])]
        if not segs:
            continue
        ids = tokenizer(segs, add_special_tokens=False)["input_ids"]
        ids = [s for s in ids if s]
        if ids:
            out.append(ids)
    return out


def _truncate_pair(a: list, b: list, max_tokens: int, rng: random.Random) -> None:
    """Trim the longer of the two from a random end until they fit (as the original code does)."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _create_pairs(documents, tokenizer, max_seq_length, short_seq_prob, seed, task) -> list[dict]:
    cls = getattr(tokenizer, "cls_token_id", None)
    sep = getattr(tokenizer, "sep_token_id", None)
    if cls is None or sep is None:
        raise ValueError(f"{task.upper()} examples are `[CLS] A [SEP] B [SEP]`: the tokenizer needs cls_token and "
                         "sep_token (train one with hf_xfmr.data.train_tokenizer('bert' or 'albert')).")
    if max_seq_length < 5:
        raise ValueError(f"max_seq_length={max_seq_length} is too short for two segments and 3 special tokens; "
                         "use at least 5 (BERT/ALBERT use 128 or 512).")
    docs = [[list(s) for s in d if len(s)] for d in documents]
    docs = [d for d in docs if d]
    if not docs:
        raise ValueError("No documents with tokens: the corpus is empty. Pass tokenized documents "
                         "(see tokenize_documents).")
    if task == "nsp" and len(docs) < 2:
        raise ValueError("NSP draws random next sentences from *other* documents: give at least 2 documents.")
    rng = random.Random(seed)
    label_key = "next_sentence_label" if task == "nsp" else "sentence_order_label"
    max_tokens = max_seq_length - 3
    examples = []
    for doc_index, document in enumerate(docs):
        target = max_tokens if rng.random() >= short_seq_prob else rng.randint(2, max_tokens)
        chunk, length, i = [], 0, 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a = [t for s in chunk[:a_end] for t in s]
                label = 0
                if task == "nsp" and (len(chunk) == 1 or rng.random() < 0.5):
                    label = 1
                    other = doc_index
                    for _ in range(10):
                        other = rng.randrange(len(docs))
                        if other != doc_index:
                            break
                    if other == doc_index:
                        other = (doc_index + 1) % len(docs)
                    rand_doc = docs[other]
                    b = []
                    for j in range(rng.randrange(len(rand_doc)), len(rand_doc)):
                        b.extend(rand_doc[j])
                        if len(b) >= max(1, target - len(a)):
                            break
                    i -= len(chunk) - a_end  # put the unused segments back
                else:
                    b = [t for s in chunk[a_end:] for t in s]
                    if not b and task == "sop" and len(a) >= 2:  # single segment: split inside it
                        cut = rng.randint(1, len(a) - 1)
                        a, b = a[:cut], a[cut:]
                    if task == "sop" and rng.random() < 0.5:
                        a, b = b, a
                        label = 1
                _truncate_pair(a, b, max_tokens, rng)
                if a and b:
                    ids = [cls] + a + [sep] + b + [sep]
                    examples.append({
                        "input_ids": ids,
                        "token_type_ids": [0] * (len(a) + 2) + [1] * (len(b) + 1),
                        "special_tokens_mask": [1] + [0] * len(a) + [1] + [0] * len(b) + [1],
                        label_key: label,
                    })
                chunk, length = [], 0
            i += 1
    if not examples:
        raise ValueError(f"No {task.upper()} example could be built: the documents are too short (each pair "
                         "needs at least 2 tokens). Use longer documents.")
    return examples


def create_sop_examples(documents: Sequence, tokenizer, max_seq_length: int = 512, short_seq_prob: float = 0.1,
                        seed: int = 0) -> list[dict]:
    """ALBERT sentence-order examples from tokenized documents (lists of segments of token ids)."""
    return _create_pairs(documents, tokenizer, max_seq_length, short_seq_prob, seed, "sop")


def create_nsp_examples(documents: Sequence, tokenizer, max_seq_length: int = 512, short_seq_prob: float = 0.1,
                        seed: int = 0) -> list[dict]:
    """BERT next-sentence examples from tokenized documents (lists of segments of token ids)."""
    return _create_pairs(documents, tokenizer, max_seq_length, short_seq_prob, seed, "nsp")
