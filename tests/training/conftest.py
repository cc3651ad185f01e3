"""Fixtures of the training tests: a tokenizer saved once per session (runs that must match each other
load this same file: WordPiece training is not reproducible run to run)."""

import pytest

from hf_xfmr.data import default_corpus, train_tokenizer


@pytest.fixture(scope="session")
def saved_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer("bert", default_corpus(max_documents=60), vocab_size=400).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def bert_tok(saved_tokenizer):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(saved_tokenizer)


@pytest.fixture(scope="session")
def gpt_tok():
    return train_tokenizer("gpt", default_corpus(max_documents=30), vocab_size=300)


@pytest.fixture(scope="session")
def albert_tok():
    return train_tokenizer("albert", default_corpus(max_documents=30), vocab_size=300)

